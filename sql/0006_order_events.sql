-- The order events' outbox: every state change of an order (created, paid, closed) gets a row
-- here, written by statement-level triggers in the transaction of the change, so no path that
-- changes an order can forget its event and no event exists for a change that rolled back. The
-- order writer's relay (backend/src/workers/events.rs) produces them in id order, each with the order's
-- fields (those a change sets are never changed again: the event is the order as that change
-- left it), and marks them produced; produced rows are deleted after a day. Orders made before
-- this migration have no events.
--
-- One trigger call per statement, with the statement's rows as a transition table: the writer
-- inserts a batch of orders in one statement, so the outbox costs one INSERT ... SELECT a batch
-- (a row-level trigger halved the writer's database stage, e2e/bench/writer.sh).
CREATE TABLE order_events (
    id           BIGSERIAL PRIMARY KEY,
    order_id     BIGINT      NOT NULL,
    kind         TEXT        NOT NULL CHECK (kind IN ('created', 'paid', 'closed')),
    at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    produced_at  TIMESTAMPTZ
);

-- The relay's queue: small while Kafka keeps up.
CREATE INDEX order_events_unproduced ON order_events (id) WHERE produced_at IS NULL;

-- `SET search_path FROM CURRENT`: the functions find `order_events` in the schema they were made
-- in (`[postgres] schema`), whatever the caller's search path.
CREATE FUNCTION order_events_created() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO order_events (order_id, kind) SELECT id, 'created' FROM inserted ORDER BY id;
    RETURN NULL;
END
$$;

CREATE FUNCTION order_events_changed() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO order_events (order_id, kind)
    SELECT n.id, lower(n.status) FROM updated n JOIN previous o ON o.id = n.id
     WHERE n.status IS DISTINCT FROM o.status AND n.status IN ('PAID', 'CLOSED')
     ORDER BY n.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER orders_events_created AFTER INSERT ON orders
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION order_events_created();
CREATE TRIGGER orders_events_changed AFTER UPDATE ON orders
    REFERENCING OLD TABLE AS previous NEW TABLE AS updated
    FOR EACH STATEMENT EXECUTE FUNCTION order_events_changed();
