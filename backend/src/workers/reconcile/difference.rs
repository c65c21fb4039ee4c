//! What reconciliation reports: each request id (or transfer id) that differs between Redis and
//! PostgreSQL, and its kind.

/// A kind of difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Reserved in Redis for longer than T (by Redis' clock), no order and no refusal.
    ReservedWithoutOrder,
    /// Refused by PostgreSQL, still in the outbox.
    RefusedNotReleased,
    /// Ordered, still in the outbox.
    OrderedNotAcked,
    /// Released in Redis while its order is live.
    DoubleRelease,
    /// A live order Redis does not account for.
    OrderWithoutReservation,
    /// Closed order whose stock Redis has not taken back.
    ClosedNotReleased,
    /// Units given by one bucket and not yet taken by another (a transfer whose "take" never
    /// ran), older than T; the request id is the transfer id.
    TransferInFlight,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 7] = [
        Kind::ReservedWithoutOrder,
        Kind::RefusedNotReleased,
        Kind::OrderedNotAcked,
        Kind::DoubleRelease,
        Kind::OrderWithoutReservation,
        Kind::ClosedNotReleased,
        Kind::TransferInFlight,
    ];

    /// The label printed and written to the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ReservedWithoutOrder => "RESERVED_WITHOUT_ORDER",
            Kind::RefusedNotReleased => "REFUSED_NOT_RELEASED",
            Kind::OrderedNotAcked => "ORDERED_NOT_ACKED",
            Kind::DoubleRelease => "DOUBLE_RELEASE",
            Kind::OrderWithoutReservation => "ORDER_WITHOUT_RESERVATION",
            Kind::ClosedNotReleased => "CLOSED_NOT_RELEASED",
            Kind::TransferInFlight => "TRANSFER_IN_FLIGHT",
        }
    }
}

/// One request id that differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Kind.
    pub kind: Kind,
    /// Request id.
    pub request_id: String,
    /// User.
    pub user: String,
    /// Quantity.
    pub qty: i64,
    /// The bucket a repair acts on: the user's home bucket; for a transfer, the receiving one.
    pub bucket: u32,
}
