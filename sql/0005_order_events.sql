-- The order events' outbox: every state change of an order (created, paid, closed) is written
-- here by a trigger, in the transaction of the change, so no path that changes an order can
-- forget its event and no event exists for a change that rolled back. The order writer's relay
-- (backend/src/events.rs) produces them to the events topic in id order and marks them
-- produced; produced rows are deleted after a day. Orders made before this migration have no
-- events.
CREATE TABLE order_events (
    id           BIGSERIAL PRIMARY KEY,
    order_id     BIGINT      NOT NULL,
    kind         TEXT        NOT NULL CHECK (kind IN ('created', 'paid', 'closed')),
    -- The order's row as the change left it (every column the event carries).
    snapshot     JSONB       NOT NULL,
    at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    produced_at  TIMESTAMPTZ
);

-- The relay's queue: small while Kafka keeps up.
CREATE INDEX order_events_unproduced ON order_events (id) WHERE produced_at IS NULL;

-- `SET search_path FROM CURRENT`: the function finds `order_events` in the schema it was made
-- in (`[postgres] schema`), whatever the caller's search path.
CREATE FUNCTION order_event() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    kind TEXT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'created';
    ELSIF NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN ('PAID', 'CLOSED') THEN
        kind := lower(NEW.status);
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO order_events (order_id, kind, snapshot) VALUES (NEW.id, kind, jsonb_build_object(
        'order_id', NEW.id, 'request_id', NEW.request_id, 'campaign_id', NEW.campaign_id,
        'user_id', NEW.user_id, 'sku', NEW.sku, 'qty', NEW.qty, 'amount_cents', NEW.amount_cents,
        'status', NEW.status, 'reserved_at', NEW.reserved_at, 'created_at', NEW.created_at,
        'pay_by', NEW.pay_by, 'paid_at', NEW.paid_at, 'payment_ref', NEW.payment_ref,
        'closed_at', NEW.closed_at));
    RETURN NULL;
END
$$;

CREATE TRIGGER orders_events AFTER INSERT OR UPDATE OF status ON orders
    FOR EACH ROW EXECUTE FUNCTION order_event();
