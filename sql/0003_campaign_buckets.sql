-- Hot-stock buckets: how many key sets a campaign's sale is split over in Redis
-- (protocol::keys::Bucket; 1: no buckets, the campaign's own keys). Written by publish while the
-- campaign is DRAFT only: a buyer's home bucket is their user id modulo this count, so it never
-- changes under a live sale (publish refuses a file asking another count once it is not DRAFT).
ALTER TABLE campaigns
    ADD COLUMN buckets INT NOT NULL DEFAULT 1 CHECK (buckets BETWEEN 1 AND 64);
