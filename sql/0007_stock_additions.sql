-- More stock for a published campaign (`order-writer campaign add-stock ID N`): each addition is
-- a ledger row, applied once to PostgreSQL (total_stock and stock_added grow together, in the
-- row's transaction) and once to Redis (lua/restock.lua, idempotent by the addition's ref).
-- The file's `stock` stays what was published first: total_stock - stock_added.
ALTER TABLE campaigns ADD COLUMN stock_added BIGINT NOT NULL DEFAULT 0 CHECK (stock_added >= 0);

CREATE TABLE stock_additions (
    campaign_id  TEXT        NOT NULL REFERENCES campaigns (id),
    ref          TEXT        NOT NULL,
    qty          BIGINT      NOT NULL CHECK (qty > 0),
    added_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- When every bucket of Redis took it (NULL: not yet; `add-stock --ref REF` again finishes it).
    applied_at   TIMESTAMPTZ,
    PRIMARY KEY (campaign_id, ref)
);
