-- The order writer's schema. PostgreSQL is the stock's source of truth; Redis only holds the
-- published copy that filters the crowd at the edge.

-- A campaign and its stock. `sold` is the database's own count of ordered units; the conditional
-- update `sold + n <= total_stock` is the last guard against overselling.
CREATE TABLE campaigns (
    id               TEXT PRIMARY KEY,
    sku              TEXT        NOT NULL,
    total_stock      BIGINT      NOT NULL CHECK (total_stock >= 0),
    sold             BIGINT      NOT NULL DEFAULT 0,
    per_user_limit   BIGINT      NOT NULL CHECK (per_user_limit >= 1),
    price_cents      BIGINT      NOT NULL CHECK (price_cents >= 0),
    price_version    BIGINT      NOT NULL DEFAULT 1,
    stock_version    BIGINT      NOT NULL DEFAULT 1,
    starts_at        TIMESTAMPTZ NOT NULL,
    ends_at          TIMESTAMPTZ NOT NULL,
    pay_window_secs  BIGINT      NOT NULL CHECK (pay_window_secs > 0),
    pause_replenish  BOOLEAN     NOT NULL DEFAULT FALSE,
    state            TEXT        NOT NULL DEFAULT 'DRAFT'
                     CHECK (state IN ('DRAFT', 'READY', 'LIVE', 'ENDED')),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at),
    CHECK (sold >= 0 AND sold <= total_stock)
);

-- One order per reservation. `request_id` is the reservation's global id, so a record delivered
-- twice can never make two orders.
CREATE TABLE orders (
    id              BIGSERIAL PRIMARY KEY,
    request_id      TEXT        NOT NULL UNIQUE,
    campaign_id     TEXT        NOT NULL REFERENCES campaigns (id),
    user_id         TEXT        NOT NULL,
    sku             TEXT        NOT NULL,
    qty             BIGINT      NOT NULL CHECK (qty >= 1),
    amount_cents    BIGINT      NOT NULL CHECK (amount_cents >= 0),
    price_version   BIGINT      NOT NULL,
    stock_version   BIGINT      NOT NULL,
    one_per_user    BOOLEAN     NOT NULL,
    status          TEXT        NOT NULL DEFAULT 'PENDING_PAYMENT'
                    CHECK (status IN ('PENDING_PAYMENT', 'PAID', 'CLOSED')),
    reserved_at     TIMESTAMPTZ NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    pay_by          TIMESTAMPTZ NOT NULL,
    paid_at         TIMESTAMPTZ,
    payment_ref     TEXT UNIQUE,
    closed_at       TIMESTAMPTZ,
    -- A CLOSED order's stock goes back to Redis after the close commits. FALSE until release.lua
    -- ran for it, so a Redis outage between the two only delays the release (the close worker
    -- retries every CLOSED order still FALSE here).
    redis_released  BOOLEAN     NOT NULL DEFAULT FALSE
);

-- Where the campaign's limit is 1, one user can hold one order of a sku in a campaign, whatever
-- request ids arrive: the seed's uk_activity_user_sku. Partial, because campaigns with a larger
-- limit allow several orders per user (the Redis script enforces their sum). A CLOSED order gave
-- its unit back (Redis released it, so the user may reserve again): it no longer counts.
CREATE UNIQUE INDEX orders_one_per_user ON orders (campaign_id, user_id, sku)
    WHERE one_per_user AND status <> 'CLOSED';

-- The timeout-close worker scans only unpaid orders by deadline; the partial index keeps that
-- scan small while paid and closed orders pile up.
CREATE INDEX orders_unpaid_by_deadline ON orders (pay_by) WHERE status = 'PENDING_PAYMENT';

-- Reconciliation and result pages read a campaign's orders.
CREATE INDEX orders_by_campaign ON orders (campaign_id, status);

-- Every stock movement, one row each, so the stock can be recomputed and audited.
-- delta < 0 takes stock (ORDER), delta > 0 gives it back (CLOSE, REPAIR).
CREATE TABLE stock_ledger (
    id           BIGSERIAL PRIMARY KEY,
    campaign_id  TEXT        NOT NULL REFERENCES campaigns (id),
    request_id   TEXT        NOT NULL,
    delta        BIGINT      NOT NULL,
    reason       TEXT        NOT NULL CHECK (reason IN ('ORDER', 'CLOSE', 'REPAIR')),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- One movement of each kind per reservation: a retried close or repair cannot apply twice.
    UNIQUE (request_id, reason)
);

-- The close worker's retry list: closed orders whose stock is not back in Redis yet. Tiny
-- (empty while Redis is healthy), so the partial index costs nothing on the hot path.
CREATE INDEX orders_closed_unreleased ON orders (id) WHERE status = 'CLOSED' AND NOT redis_released;

-- Reservations that did not become orders, with the reason (the result query reads it). A
-- request id here never becomes an order: the writer checks this table inside its transaction,
-- and reconciliation's repair writes here before releasing, under the campaign's row lock.
CREATE TABLE reservation_results (
    request_id   TEXT PRIMARY KEY,
    campaign_id  TEXT        NOT NULL,
    user_id      TEXT        NOT NULL,
    qty          BIGINT      NOT NULL,
    status       TEXT        NOT NULL CHECK (status IN ('SOLD_OUT', 'FAILED')),
    reason       TEXT        NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Reconciliation reads one campaign's refusals.
CREATE INDEX reservation_results_by_campaign ON reservation_results (campaign_id);

-- The next Kafka offset to read, per partition, committed in the same transaction as the orders
-- it covers: a crash anywhere replays at most an uncommitted batch, which the unique keys absorb.
CREATE TABLE consumer_offsets (
    topic        TEXT   NOT NULL,
    partition    INT    NOT NULL,
    next_offset  BIGINT NOT NULL,
    PRIMARY KEY (topic, partition)
);

-- Records that could not be decoded. Kept with their position; the partition moves on.
CREATE TABLE dead_letters (
    id          BIGSERIAL PRIMARY KEY,
    topic       TEXT        NOT NULL,
    partition   INT         NOT NULL,
    "offset"    BIGINT      NOT NULL,
    payload     BYTEA       NOT NULL,
    error       TEXT        NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (topic, partition, "offset")
);

-- One row per repair or compensation action, for humans.
CREATE TABLE audit_log (
    id           BIGSERIAL PRIMARY KEY,
    campaign_id  TEXT        NOT NULL,
    request_id   TEXT,
    action       TEXT        NOT NULL,
    detail       JSONB       NOT NULL DEFAULT '{}'::jsonb,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
