//! Reservations of one bucket sent together: the orders that reach the script step for the same
//! bucket while a call of that bucket is in flight are collected and sent as one `reserve.lua`
//! call ([`Scripts::reserve_batch`]), as a database's group commit does. One Redis master runs
//! one script at a time, and most of a single reservation's cost is the call, not the order
//! (`reserve-ceiling`: about 3.7× the reservations per second at 32 orders per call).
//!
//! - A lone order on an idle bucket (no call in flight, nobody waiting) is sent at once, alone
//!   (by the sending runtime, as every batch): never delayed by the wait.
//! - Otherwise the order waits in its bucket's lane. The lane is sent when it holds
//!   [`BatchConf::max`] orders, when a call of the bucket comes back, or [`BatchConf::wait`] after
//!   its first order, whichever comes first, with at most [`CALLS_PER_BUCKET`] calls in flight
//!   per bucket (the next one is written while Redis runs the last).
//! - Each order keeps its own deadline (from the moment it asked). An order whose deadline passes
//!   while it still waits in the lane is taken out of it: it was never sent, nothing was
//!   reserved or spent, and there is nothing to undo: [`Attempt::Behind`] (`TRY_LATER`) while
//!   the bucket's calls are still answered, [`Attempt::NoAnswer`] without a client
//!   (`SERVICE_DEGRADED`) when none was within the bound. Once sent, an order waits for its call
//!   its whole wait again, counted from the send.
//!   An order whose batch was sent learns the client (the connection) it was written to before
//!   anything else can happen to it, so that its undo, sent on that client, runs in Redis after
//!   the batch, exactly as the undo of a call of its own does ([`crate::reserve`]).
//! - `max = 1` is the path of one call per order, with nothing collected.
//! - The orders at the step (waiting in the lane or in a call) are bounded by the bucket's
//!   adaptive limit ([`crate::reserve::admission`]): as many as its calls answer within the
//!   timeout at their recent round trip. An order leaves the step when its call's answer is read
//!   on the sending runtime, or when it leaves the lane unsent; the limit is told each call's
//!   round trip from its write to that read, so a proxy thread that resumes the order's request
//!   late neither keeps it counted nor makes Redis look slow. (`max = 1`, a measurement path,
//!   still counts and times an order until its request has the answer.)

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use fred::clients::Pool;
use fred::prelude::Client;
use protocol::keys::Bucket;
use protocol::scripts::{ReserveCall, ReserveOutcome, Scripts};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::checks::pressure::Pressure;
use crate::reserve::admission::{self, Limit};

/// How reservations are collected: at most `max` orders per call, sent at the latest `wait` after
/// the first one waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchConf {
    /// Orders in one call (1: one call per order).
    pub max: usize,
    /// The longest an order waits for others before its call goes out.
    pub wait: Duration,
    /// Whether the bucket's adaptive limit refuses orders past it (`crate::reserve::admission`);
    /// off only to measure a sale without it (`[redis] admission = false`).
    pub admission: bool,
}

/// The default orders per call: `reserve-ceiling` peaked at 32 (42,292 reservations/s against
/// 11,374 for one per call; 128 gave no more).
pub const DEFAULT_BATCH_MAX: usize = 32;

/// The default wait: a fraction of a 32-order call's time in Redis (about 600 µs).
pub const DEFAULT_BATCH_WAIT: Duration = Duration::from_micros(200);

/// The largest `max` a configuration may set.
pub const BATCH_MAX_LIMIT: usize = 1024;

/// The longest `wait` a configuration may set, in µs: well under the smallest reservation
/// timeout.
pub const BATCH_WAIT_LIMIT_US: u64 = 10_000;

/// Calls of one bucket in flight at once.
pub const CALLS_PER_BUCKET: usize = 2;

impl Default for BatchConf {
    fn default() -> Self {
        Self { max: DEFAULT_BATCH_MAX, wait: DEFAULT_BATCH_WAIT, admission: true }
    }
}

/// What became of one order's call.
#[derive(Debug)]
pub enum Attempt {
    /// The script's answer for this order.
    Answered(ReserveOutcome),
    /// No answer by the order's deadline, or the call failed: `cause`. With `sent_on`, the call
    /// was written to that client and may have reserved (undo it there); without, the order was
    /// never sent.
    NoAnswer {
        /// Why.
        cause: String,
        /// The client the order's call was written to.
        sent_on: Option<Client>,
    },
    /// Not sent: the bucket's orders in flight are at its limit.
    Overloaded {
        /// The limit.
        limit: usize,
    },
    /// Not sent by the order's deadline while the bucket's calls were still being answered (one
    /// came back within the bound): Redis is behind this bucket's crowd, not down. Nothing was
    /// reserved or spent; the buyer is told to try later, not that the service is down.
    Behind {
        /// How long the order waited.
        waited: Duration,
    },
}

/// Sends reservations, collected per bucket (see the module's doc).
#[derive(Clone)]
pub struct Batcher {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    scripts: Scripts,
    conf: BatchConf,
    /// The bound of one call, for the lane's own bookkeeping (each order has its own deadline).
    bound: Duration,
    lanes: Mutex<HashMap<String, Arc<Lane>>>,
    dispatch: Dispatch,
    calls: AtomicU64,
    orders: AtomicU64,
    /// How late the I/O runtime's thread runs (probed on it when the batcher is given one).
    io_lag: Arc<Pressure>,
}

/// How many calls this batcher wrote, and how many orders they carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// `reserve.lua` calls.
    pub calls: u64,
    /// Orders in them.
    pub orders: u64,
}

/// Where the lanes' batches are sent and their answers delivered: never on a proxy's request
/// threads, so that a lane's progress never waits behind the request tasks of a busy proxy
/// thread (measured: with the sends on Pingora's threads, a burst of 2,000 signed orders in a
/// debug build held a batch's answer for 0.8 s, past its orders' deadlines).
enum Dispatch {
    /// The sale's I/O runtime (its own thread, [`crate::Start::io_thread`]), where the Redis connections run too: a
    /// batch is written and its answer read on one thread, with no hand-over between threads.
    On(tokio::runtime::Handle),
    /// A runtime of its own (one thread, `reserve-batch`), started at the first send.
    Own(std::sync::OnceLock<tokio::runtime::Runtime>),
}

impl Dispatch {
    fn spawn<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        match self {
            Dispatch::On(handle) => {
                handle.spawn(f);
            }
            Dispatch::Own(rt) => {
                let rt = rt.get_or_init(|| {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(1)
                        .thread_name("reserve-batch")
                        .enable_all()
                        .build()
                        .expect("a runtime of one thread starts")
                });
                rt.spawn(f);
            }
        }
    }
}

impl Drop for Dispatch {
    fn drop(&mut self) {
        // Dropped maybe from within another runtime: never block there.
        if let Dispatch::Own(rt) = self {
            if let Some(rt) = rt.take() {
                rt.shutdown_background();
            }
        }
    }
}

/// One bucket's lane.
struct Lane {
    bucket: Bucket,
    state: Mutex<LaneState>,
}

struct LaneState {
    /// Orders at the script step (waiting in the lane, or in a call whose answer was not read
    /// yet), bounded by `admission`.
    orders: usize,
    admission: Limit,
    in_flight: usize,
    queue: VecDeque<Waiting>,
    timer: bool,
    next_id: u64,
    /// When an order of this bucket last had its answer.
    answered_at: Option<std::time::Instant>,
}

impl LaneState {
    /// Takes one more order to the step, or refuses it at once past the adaptive limit (when
    /// `limited`), counted in the metrics.
    fn admit(&mut self, limited: bool) -> Result<(), Attempt> {
        if limited && !self.admission.admits(self.orders) {
            crate::serve::metrics::metrics().admission_refused();
            return Err(Attempt::Overloaded { limit: self.admission.limit() });
        }
        self.orders += 1;
        Ok(())
    }

    /// A call of this lane had its answer now, `round_trip` after it was written (Redis's share
    /// of it), or had none: the limit and the metrics are told.
    fn call_ended(&mut self, round_trip: Option<Duration>) {
        match round_trip {
            Some(rtt) => {
                self.answered_at = Some(std::time::Instant::now());
                self.admission.answered(rtt);
                crate::serve::metrics::metrics().call_answered(rtt, self.admission.limit());
            }
            None => self.admission.unanswered(),
        }
    }
}

/// An order of the one-call-per-order path (`max = 1`) counted in its lane's `orders` until
/// dropped (also when its request is).
struct Entered<'a>(&'a Lane);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).orders -= 1;
    }
}

/// What an order's arrival starts.
enum Trigger {
    /// The bucket is idle (the order is sent alone), or the lane is full: send it now.
    Now,
    /// The lane's first order: send it after the wait.
    Timer,
    /// A send is already due.
    None,
}

/// An order waiting in a lane.
struct Waiting {
    id: u64,
    call: ReserveCall,
    sent: oneshot::Sender<Client>,
    answer: oneshot::Sender<Result<ReserveOutcome, String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").field("conf", &self.inner.conf).finish_non_exhaustive()
    }
}

impl Batcher {
    /// A batcher over `pool`, each call bounded by `bound`, sending its batches on `io` (the
    /// runtime of `pool`'s connections, best) or, without, on a thread of its own.
    pub fn new(
        pool: Pool,
        scripts: Scripts,
        conf: BatchConf,
        bound: Duration,
        io: Option<tokio::runtime::Handle>,
    ) -> Self {
        let conf = BatchConf { max: conf.max.clamp(1, BATCH_MAX_LIMIT), ..conf };
        let lanes = Mutex::new(HashMap::new());
        let (calls, orders) = (AtomicU64::new(0), AtomicU64::new(0));
        let io_lag = Arc::new(Pressure::default());
        if let Some(io) = &io {
            io_lag.watch_runtime(io);
        }
        let dispatch = io.map_or_else(|| Dispatch::Own(std::sync::OnceLock::new()), Dispatch::On);
        let inner = Inner { pool, scripts, conf, bound, lanes, dispatch, calls, orders, io_lag };
        Self { inner: Arc::new(inner) }
    }

    /// The calls written so far, and their orders.
    pub fn sent(&self) -> Sent {
        Sent {
            calls: self.inner.calls.load(Ordering::Relaxed),
            orders: self.inner.orders.load(Ordering::Relaxed),
        }
    }

    fn count(&self, orders: usize) {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.orders.fetch_add(orders as u64, Ordering::Relaxed);
    }

    /// How this batcher collects.
    pub fn conf(&self) -> BatchConf {
        self.inner.conf
    }

    /// The runtime it sends on, if it was given one ([`Batcher::new`]'s `io`).
    pub fn io(&self) -> Option<tokio::runtime::Handle> {
        match &self.inner.dispatch {
            Dispatch::On(handle) => Some(handle.clone()),
            Dispatch::Own(_) => None,
        }
    }

    /// Runs `call` in `bucket`, alone or with others, answering by `deadline` at the latest; or
    /// at once [`Attempt::Overloaded`] when the bucket's orders at the step are at its adaptive
    /// limit ([`crate::reserve::admission`]).
    pub async fn call(&self, bucket: &Bucket, call: ReserveCall, deadline: Instant) -> Attempt {
        let lane = self.lane(bucket);
        if self.inner.conf.max <= 1 {
            return self.one_by_one(&lane, bucket, &call, deadline).await;
        }
        self.collected(&lane, call, deadline).await
    }

    /// The path of one call per order (`max = 1`), on the request's own task.
    async fn one_by_one(
        &self,
        lane: &Lane,
        bucket: &Bucket,
        call: &ReserveCall,
        deadline: Instant,
    ) -> Attempt {
        let started = std::time::Instant::now();
        if let Err(overloaded) = lock(&lane.state).admit(self.inner.conf.admission) {
            return overloaded;
        }
        let entered = Entered(lane);
        let attempt = self.alone(bucket, call, deadline).await;
        {
            let mut st = lock(&lane.state);
            // Each order its own call: the round is the orders at the step (at least a batched
            // bucket's at the default), all in flight at once.
            let round = st.orders.max(CALLS_PER_BUCKET * DEFAULT_BATCH_MAX);
            st.admission.set_round(round);
            let answered = matches!(attempt, Attempt::Answered(_));
            st.call_ended(answered.then(|| started.elapsed()));
        }
        drop(entered);
        attempt
    }

    /// Queues `call` in its bucket's lane (admitted, or refused at the limit) and waits for its
    /// batch to be sent and answered.
    async fn collected(&self, lane: &Arc<Lane>, call: ReserveCall, deadline: Instant) -> Attempt {
        let started = std::time::Instant::now();
        let (sent, sent_rx) = oneshot::channel();
        let (answer, answer_rx) = oneshot::channel();
        let (id, trigger) = match self.enqueue(lane, call, sent, answer) {
            Ok(queued) => queued,
            Err(overloaded) => return overloaded,
        };
        self.start(lane, trigger);
        let client = match self.sent_on(lane, id, started, deadline, sent_rx).await {
            Ok(client) => client,
            Err(unsent) => return unsent,
        };
        // Sent: the call gets the order's whole wait from now, not what the lane left of it, so
        // that a call Redis answers within its bound is not undone for the time its order
        // queued (the hold after the call stays within `protocol::timing`'s).
        let wait = deadline.saturating_duration_since(Instant::from_std(started));
        let cause = match tokio::time::timeout_at(deadline.max(Instant::now() + wait), answer_rx).await {
            Ok(Ok(Ok(outcome))) => return Attempt::Answered(outcome),
            Ok(Ok(Err(cause))) => cause,
            Ok(Err(_)) => "the batch's answer was lost".into(),
            Err(_) => self.late(),
        };
        Attempt::NoAnswer { cause, sent_on: Some(client) }
    }

    /// Puts the order in `lane`'s queue, admitted (else `Overloaded`), with its id and what its
    /// arrival starts.
    fn enqueue(
        &self,
        lane: &Lane,
        call: ReserveCall,
        sent: oneshot::Sender<Client>,
        answer: oneshot::Sender<Result<ReserveOutcome, String>>,
    ) -> Result<(u64, Trigger), Attempt> {
        let mut st = lock(&lane.state);
        st.admit(self.inner.conf.admission)?;
        let id = st.next_id;
        st.next_id += 1;
        st.queue.push_back(Waiting { id, call, sent, answer });
        let idle = st.in_flight == 0 && st.queue.len() == 1;
        let full = st.queue.len() >= self.inner.conf.max;
        let trigger = if (idle || full) && st.in_flight < CALLS_PER_BUCKET {
            Trigger::Now
        } else if !st.timer {
            st.timer = true;
            Trigger::Timer
        } else {
            Trigger::None
        };
        Ok((id, trigger))
    }

    /// Starts what an order's arrival in `lane` starts: a send now, or after the wait.
    fn start(&self, lane: &Arc<Lane>, trigger: Trigger) {
        match trigger {
            Trigger::Now => {
                self.inner.dispatch.spawn(self.clone().send(lane.clone()));
            }
            Trigger::Timer => {
                let (this, lane, wait) = (self.clone(), lane.clone(), self.inner.conf.wait);
                self.inner.dispatch.spawn(async move {
                    tokio::time::sleep(wait).await;
                    lock(&lane.state).timer = false;
                    this.send(lane).await;
                });
            }
            Trigger::None => {}
        }
    }

    /// The client order `id`'s batch was sent on, by `deadline`; else the order's attempt: taken
    /// out unsent (behind, or no answer), or no answer on the client that is writing it now.
    async fn sent_on(
        &self,
        lane: &Lane,
        id: u64,
        started: std::time::Instant,
        deadline: Instant,
        mut sent_rx: oneshot::Receiver<Client>,
    ) -> Result<Client, Attempt> {
        let dropped = || Attempt::NoAnswer { cause: "the batch was dropped unsent".into(), sent_on: None };
        match tokio::time::timeout_at(deadline, &mut sent_rx).await {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(_)) => return Err(dropped()),
            Err(_) => {}
        }
        match self.unsent(lane, id) {
            Some(true) => return Err(Attempt::Behind { waited: started.elapsed() }),
            Some(false) => {
                return Err(Attempt::NoAnswer {
                    cause: format!("{}, never sent", self.late()),
                    sent_on: None,
                })
            }
            None => {}
        }
        // Taken by a sender that is writing it now: the client comes at once (no await between
        // taking the batch and writing it).
        match sent_rx.await {
            Ok(client) => Err(Attempt::NoAnswer { cause: self.late(), sent_on: Some(client) }),
            Err(_) => Err(dropped()),
        }
    }

    /// Why an order had no answer in time.
    fn late(&self) -> String {
        format!("redis did not answer within {:?}", self.inner.bound)
    }

    /// Takes order `id`, past its deadline, out of `lane` if no sender took it: `None` when one
    /// did; else whether the bucket's calls are still being answered (one came back within the
    /// bound: Redis is behind, not down). Either way the order leaves the step; the limit learns
    /// of it only when no call was answered (it knows the calls' round trips, not the lane's).
    fn unsent(&self, lane: &Lane, id: u64) -> Option<bool> {
        let mut st = lock(&lane.state);
        let at = st.queue.iter().position(|w| w.id == id)?;
        st.queue.remove(at);
        st.orders -= 1;
        let now = std::time::Instant::now();
        let answering = st.answered_at.is_some_and(|at| now.duration_since(at) < self.inner.bound);
        if !answering {
            st.admission.unanswered();
        }
        Some(answering)
    }

    /// One call of `call` alone, on a client of its own choosing.
    async fn alone(&self, bucket: &Bucket, call: &ReserveCall, deadline: Instant) -> Attempt {
        let client = self.inner.pool.next_connected().clone();
        self.count(1);
        let cause = match tokio::time::timeout_at(deadline, self.inner.scripts.reserve(&client, bucket, call))
            .await
        {
            Ok(Ok(outcome)) => return Attempt::Answered(outcome),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("redis did not answer within {:?}", self.inner.bound),
        };
        Attempt::NoAnswer { cause, sent_on: Some(client) }
    }

    fn lane(&self, bucket: &Bucket) -> Arc<Lane> {
        let mut lanes = lock(&self.inner.lanes);
        lanes
            .entry(bucket.keys.stock.clone())
            .or_insert_with(|| {
                let state = LaneState {
                    orders: 0,
                    admission: Limit::new(self.inner.bound, CALLS_PER_BUCKET * self.inner.conf.max),
                    in_flight: 0,
                    queue: VecDeque::new(),
                    timer: false,
                    next_id: 0,
                    answered_at: None,
                };
                Arc::new(Lane { bucket: bucket.clone(), state: Mutex::new(state) })
            })
            .clone()
    }

    /// Sends the lane's waiting orders, a batch at a time, while there are some and fewer than
    /// [`CALLS_PER_BUCKET`] calls are in flight.
    async fn send(self, lane: Arc<Lane>) {
        loop {
            let batch: Vec<Waiting> = {
                let mut st = lock(&lane.state);
                if st.queue.is_empty() || st.in_flight >= CALLS_PER_BUCKET {
                    return;
                }
                st.in_flight += 1;
                let n = st.queue.len().min(self.inner.conf.max);
                st.queue.drain(..n).collect()
            };
            let client = self.inner.pool.next_connected().clone();
            self.count(batch.len());
            let mut calls = Vec::with_capacity(batch.len());
            let mut waiting = Vec::with_capacity(batch.len());
            for w in batch {
                calls.push(w.call);
                waiting.push((w.sent, w.answer));
            }
            let written = std::time::Instant::now();
            let call = tokio::time::timeout(
                self.inner.bound,
                self.inner.scripts.reserve_batch(&client, &lane.bucket, &calls),
            );
            let mut call = std::pin::pin!(call);
            // The first poll writes the call to the client's connection; only then may an order
            // that gives up send its undo there.
            let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
            let mut answers = Vec::with_capacity(waiting.len());
            for (sent, answer) in waiting {
                let _ = sent.send(client.clone());
                answers.push(answer);
            }
            let result = match first {
                Poll::Ready(r) => r,
                Poll::Pending => call.await,
            };
            let answered = matches!(result, Ok(Ok(_)));
            let round_trip = admission::redis_share(written.elapsed(), self.inner.io_lag.lag());
            step_done(&lane, answers.len(), answered.then_some(round_trip));
            match result {
                Ok(Ok(outcomes)) => {
                    for (answer, outcome) in answers.into_iter().zip(outcomes) {
                        let _ = answer.send(Ok(outcome));
                    }
                }
                Ok(Err(e)) => {
                    let cause = e.to_string();
                    for answer in answers {
                        let _ = answer.send(Err(cause.clone()));
                    }
                }
                Err(_) => {
                    let cause = format!("redis did not answer within {:?}", self.inner.bound);
                    for answer in answers {
                        let _ = answer.send(Err(cause.clone()));
                    }
                }
            }
        }
    }
}

/// A call of `lane` carrying `orders` ended now, as its sender read it: they leave the step, and
/// the limit is told the call's `round_trip` (Redis's share of it: not the orders' wait in the
/// lane, nor the time a proxy thread takes to resume an order's request), or that it had none.
fn step_done(lane: &Lane, orders: usize, round_trip: Option<Duration>) {
    let mut st = lock(&lane.state);
    st.in_flight -= 1;
    st.orders -= orders;
    st.call_ended(round_trip);
}
