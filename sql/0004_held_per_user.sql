-- The database's check of a per-user limit above 1 (the writer sums a user's open orders under
-- the campaign's row lock before ordering, for when Redis forgot what the user holds): one index
-- probe per user. Partial, like orders_one_per_user: limit-1 campaigns have their unique index,
-- and a CLOSED order gave its units back.
CREATE INDEX orders_held_per_user ON orders (campaign_id, user_id) INCLUDE (qty)
    WHERE NOT one_per_user AND status <> 'CLOSED';
