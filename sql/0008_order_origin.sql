-- Where each winning order came from, for the audit (`order-writer campaign audit`, docs/operations.md
-- "Audit"): the client's address after trusted proxies, the device id its campaign token is bound
-- to (`x-device-id`) and the account's creation time (the login JWT's `registered_at`), as the
-- reservation record carries them (protocol/src/record.rs, `Origin`). Nullable: orders written
-- before this migration, and records without them (the order writer's own test reservations),
-- have none. No index: the audit reads a campaign's orders once, by `orders_by_campaign`.
ALTER TABLE orders
    ADD COLUMN client_ip     INET,
    ADD COLUMN device_id     TEXT,
    ADD COLUMN registered_at TIMESTAMPTZ;
