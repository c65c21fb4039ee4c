-- The order path, leaner: what each batch of orders writes, per row, is what the writer's
-- throughput is made of. Measured on 2 cores with 4 writers of 1,000 orders per transaction
-- (e2e/bench/writer.sh): without the two foreign keys below the same inserts ran 1.4x faster.

-- No foreign keys from the hot tables to `campaigns`. Each checked row takes a KEY SHARE lock on
-- its campaign's row; with several batches of the same campaign in flight, those shared locks
-- on the one hot row become MultiXacts, row after row. The reference still holds by
-- construction: every transaction that writes an order or a ledger row also updates or locks its
-- campaign's row (the writer's conditional stock update, the close and repair paths' row lock),
-- and no code path deletes a campaign.
ALTER TABLE orders DROP CONSTRAINT orders_campaign_id_fkey;
ALTER TABLE stock_ledger DROP CONSTRAINT stock_ledger_campaign_id_fkey;

-- Payment references exist only on paid orders: index those, not a NULL per unpaid order.
ALTER TABLE orders DROP CONSTRAINT orders_payment_ref_key;
CREATE UNIQUE INDEX orders_payment_ref ON orders (payment_ref) WHERE payment_ref IS NOT NULL;

-- One movement of each kind per reservation is already the ledger's identity: it becomes the
-- primary key, and the surrogate id (one more index per row) goes.
ALTER TABLE stock_ledger
    DROP COLUMN id,
    DROP CONSTRAINT stock_ledger_request_id_reason_key,
    ADD PRIMARY KEY (request_id, reason);
