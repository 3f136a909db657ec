//! The open connections of one listener: how many there are, which of them are idle, and the
//! eviction that keeps idle connections from locking new clients out (`docs/limits.md`,
//! "Network limits").

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// One open connection, shared by its task, its per-request service and the registry.
pub struct Conn {
    id: u64,
    accepted: Instant,
    /// Whether a request has begun: a connection must start one within the header timeout.
    started: AtomicBool,
    in_flight: AtomicUsize,
    /// When the connection last became idle (accepted, or its last request finished).
    idle_since: Mutex<Instant>,
    /// Signalled when the registry evicts this connection to make room for a new one.
    evicted: Notify,
}

impl Conn {
    /// Marks a request as in progress until the returned guard is dropped (with the response
    /// body, once it has been sent, or with the request if it is abandoned).
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.started.store(true, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Resolves `timeout` after the connection was accepted if it has not begun a request by
    /// then (its first request's headers have not arrived); never otherwise.
    pub async fn first_request_timeout(&self, timeout: Duration) {
        tokio::time::sleep_until((self.accepted + timeout).into()).await;
        if self.started.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    /// How long the connection has had no request in progress; `None` while it has one.
    pub fn idle_for(&self) -> Option<Duration> {
        let since = *self.idle_since.lock().expect("not poisoned");
        (self.in_flight.load(Ordering::SeqCst) == 0).then(|| since.elapsed())
    }

    /// Resolves once no request has been in progress for `timeout`.
    pub async fn idle_timeout(&self, timeout: Duration) {
        loop {
            let wait = match self.idle_for() {
                Some(idle) if idle >= timeout => return,
                Some(idle) => timeout - idle,
                None => timeout,
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Resolves once the registry has evicted this connection.
    pub async fn evicted(&self) {
        self.evicted.notified().await;
    }
}

/// A request in progress on a [`Conn`].
pub struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut since = self.0.idle_since.lock().expect("not poisoned");
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            *since = Instant::now();
        }
    }
}

/// The registry of a listener's open connections, at most `max` of them.
pub struct Conns {
    max: usize,
    open: Mutex<BTreeMap<u64, Arc<Conn>>>,
    next_id: AtomicUsize,
    /// Signalled whenever a connection leaves; shutdown waits on it for the last one.
    left: Notify,
}

impl Conns {
    pub fn new(max: usize) -> Conns {
        Conns {
            max: max.max(1),
            open: Mutex::default(),
            next_id: AtomicUsize::new(0),
            left: Notify::new(),
        }
    }

    /// Registers a newly accepted connection. At the cap, the connection that has been idle
    /// the longest is evicted to make room: idle and half-open sockets never lock new clients
    /// out. Only when every connection has a request in progress is the new one refused
    /// (`None`: the caller closes it).
    pub fn admit(&self) -> Option<Arc<Conn>> {
        let mut open = self.open.lock().expect("not poisoned");
        if open.len() >= self.max {
            let victim = open
                .values()
                .filter_map(|c| Some((c.idle_for()?, c.id)))
                .max()
                .map(|(_, id)| id)?;
            let evicted = open.remove(&victim).expect("listed above");
            evicted.evicted.notify_one();
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        let now = Instant::now();
        let conn = Arc::new(Conn {
            id,
            accepted: now,
            started: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(now),
            evicted: Notify::new(),
        });
        open.insert(id, conn.clone());
        Some(conn)
    }

    /// Forgets a connection whose task has ended (a no-op for evicted ones).
    pub fn remove(&self, conn: &Conn) {
        self.open.lock().expect("not poisoned").remove(&conn.id);
        self.left.notify_waiters();
    }

    pub fn len(&self) -> usize {
        self.open.lock().expect("not poisoned").len()
    }

    /// Resolves once every registered connection has left.
    pub async fn drained(&self) {
        loop {
            let left = self.left.notified();
            if self.len() == 0 {
                return;
            }
            left.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_longest_idle_connection_is_evicted_and_busy_ones_never() {
        let conns = Conns::new(2);
        let busy = conns.admit().unwrap();
        let _request = busy.begin();
        let idle = conns.admit().unwrap();
        let newcomer = conns.admit().expect("the idle connection makes room");
        assert_eq!(conns.len(), 2);
        assert!(!conns.open.lock().unwrap().contains_key(&idle.id));
        assert!(conns.open.lock().unwrap().contains_key(&busy.id));
        let _second = newcomer.begin();
        assert!(conns.admit().is_none(), "every connection is busy");
    }
}
