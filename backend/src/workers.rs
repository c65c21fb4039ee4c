//! The order writer's background work beside the [`crate::writer`]: the [`sweeper`] (outbox
//! entries without an order, to Kafka again), the [`closer`] (unpaid orders past their pay-by
//! time), the order-events relay ([`events`]: the `order_events` outbox to Kafka) and
//! [`reconcile`] (the seed's equation, its differences and repairs).

pub mod closer;
pub mod events;
pub mod reconcile;
pub mod sweeper;
