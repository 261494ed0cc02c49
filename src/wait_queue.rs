//! Who waits on which key, in what order, and until when: the queues of
//! `BLOCK` callers, free of Redis.
//!
//! Each key with waiters has one queue, served strictly in arrival order.
//! A waiter may carry a deadline (monotonic microseconds, so a wall-clock
//! step neither stretches nor cuts a wait). Every operation on one waiter
//! (add, find the first, remove any, find the first expired) costs
//! O(log n): a waiter may leave from anywhere in its queue (a disconnect, a
//! cluster redirect), and a busy key may hold thousands.
//!
//! The registry also enforces the caps on waiters per key and in total,
//! and records each queue's pending timer, so that the Redis side keeps
//! at most one timer per queue.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A waiting client, as the server identifies it.
pub type ClientId = usize;
/// One queue, for as long as it has waiters.
pub type QueueId = u64;
/// A database number.
pub type Db = i32;

/// Most waiters per key and in total; 0 refuses every waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub per_key: usize,
    pub total: usize,
}

/// Why a waiter was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    Key,
    Total,
}

/// A timer the server will fire for a queue: its id and when it is due
/// (monotonic µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer {
    pub id: u64,
    pub due_us: u64,
}

/// The first waiter of a queue.
#[derive(Debug, PartialEq, Eq)]
pub struct Head<'a, P> {
    pub client: ClientId,
    pub payload: &'a P,
}

/// A waiter taken out of its queue.
#[derive(Debug, PartialEq, Eq)]
pub struct Removed<P> {
    pub queue: QueueId,
    pub payload: P,
    /// It was first in its queue: the next one may be servable now.
    pub was_first: bool,
    /// Its queue is gone with it, and this timer of the queue must be
    /// stopped.
    pub orphan_timer: Option<Timer>,
}

struct Waiter<P> {
    client: ClientId,
    payload: P,
    deadline_us: Option<u64>,
}

struct Queue<P> {
    db: Db,
    key: Vec<u8>,
    /// By arrival number.
    waiters: BTreeMap<u64, Waiter<P>>,
    /// (deadline, arrival number) of the waiters that have a deadline.
    deadlines: BTreeSet<(u64, u64)>,
    timer: Option<Timer>,
}

/// The waiters of every key. `P` is what the server needs to serve one
/// (the command and its arguments).
pub struct Waiters<P> {
    by_key: HashMap<Db, HashMap<Vec<u8>, QueueId>>,
    queues: HashMap<QueueId, Queue<P>>,
    /// Where each client waits: its queue and arrival number.
    clients: HashMap<ClientId, (QueueId, u64)>,
    next_queue: QueueId,
    next_arrival: u64,
}

impl<P> Default for Waiters<P> {
    fn default() -> Self {
        Waiters {
            by_key: HashMap::new(),
            queues: HashMap::new(),
            clients: HashMap::new(),
            next_queue: 1,
            next_arrival: 0,
        }
    }
}

impl<P> Waiters<P> {
    /// Waiters in all queues.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// The queue of a key, if it has waiters.
    pub fn queue(&self, db: Db, key: &[u8]) -> Option<QueueId> {
        self.by_key.get(&db)?.get(key).copied()
    }

    /// Whether one more waiter on the key would fit under `caps`.
    pub fn room_for(&self, db: Db, key: &[u8], caps: Caps) -> Result<(), Full> {
        if self.len() >= caps.total {
            return Err(Full::Total);
        }
        let on_key = self.queue(db, key).and_then(|q| self.queues.get(&q)).map_or(0, |q| q.waiters.len());
        if on_key >= caps.per_key {
            return Err(Full::Key);
        }
        Ok(())
    }

    /// Queues a client behind the key's other waiters. A client waits in
    /// one queue at a time: adding it again moves it to the back of `key`.
    pub fn add(
        &mut self,
        db: Db,
        key: &[u8],
        client: ClientId,
        payload: P,
        deadline_us: Option<u64>,
        caps: Caps,
    ) -> Result<QueueId, Full> {
        self.remove(client);
        self.room_for(db, key, caps)?;
        let id = match self.queue(db, key) {
            Some(id) => id,
            None => {
                let id = self.next_queue;
                self.next_queue += 1;
                self.by_key.entry(db).or_default().insert(key.to_vec(), id);
                let queue =
                    Queue { db, key: key.to_vec(), waiters: BTreeMap::new(), deadlines: BTreeSet::new(), timer: None };
                self.queues.insert(id, queue);
                id
            }
        };
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        let Some(queue) = self.queues.get_mut(&id) else { return Err(Full::Total) };
        queue.waiters.insert(arrival, Waiter { client, payload, deadline_us });
        if let Some(deadline) = deadline_us {
            queue.deadlines.insert((deadline, arrival));
        }
        self.clients.insert(client, (id, arrival));
        Ok(id)
    }

    /// The database and key of a queue.
    pub fn key(&self, queue: QueueId) -> Option<(Db, &[u8])> {
        self.queues.get(&queue).map(|q| (q.db, q.key.as_slice()))
    }

    /// The queue's first waiter.
    pub fn head(&self, queue: QueueId) -> Option<Head<'_, P>> {
        let (_, w) = self.queues.get(&queue)?.waiters.first_key_value()?;
        Some(Head { client: w.client, payload: &w.payload })
    }

    /// What a waiting client is waiting with.
    pub fn payload(&self, client: ClientId) -> Option<&P> {
        let (queue, arrival) = self.clients.get(&client)?;
        self.queues.get(queue)?.waiters.get(arrival).map(|w| &w.payload)
    }

    /// The waiter whose deadline came first, if it is at or before
    /// `now_us` (of equal deadlines, the earlier arrival).
    pub fn first_expired(&self, queue: QueueId, now_us: u64) -> Option<Head<'_, P>> {
        let q = self.queues.get(&queue)?;
        let &(deadline, arrival) = q.deadlines.first()?;
        if deadline > now_us {
            return None;
        }
        q.waiters.get(&arrival).map(|w| Head { client: w.client, payload: &w.payload })
    }

    /// The queue's earliest deadline.
    pub fn next_deadline(&self, queue: QueueId) -> Option<u64> {
        self.queues.get(&queue)?.deadlines.first().map(|&(deadline, _)| deadline)
    }

    /// Takes a client out of its queue; its queue goes when it was the
    /// last.
    pub fn remove(&mut self, client: ClientId) -> Option<Removed<P>> {
        let (id, arrival) = self.clients.remove(&client)?;
        let queue = self.queues.get_mut(&id)?;
        let was_first = queue.waiters.first_key_value().is_some_and(|(&first, _)| first == arrival);
        let waiter = queue.waiters.remove(&arrival)?;
        if let Some(deadline) = waiter.deadline_us {
            queue.deadlines.remove(&(deadline, arrival));
        }
        let mut orphan_timer = None;
        if queue.waiters.is_empty() {
            orphan_timer = queue.timer;
            let (db, key) = (queue.db, std::mem::take(&mut queue.key));
            self.queues.remove(&id);
            if let Some(keys) = self.by_key.get_mut(&db) {
                keys.remove(&key);
                if keys.is_empty() {
                    self.by_key.remove(&db);
                }
            }
        }
        Some(Removed { queue: id, payload: waiter.payload, was_first, orphan_timer })
    }

    /// The queue's pending timer.
    pub fn timer(&self, queue: QueueId) -> Option<Timer> {
        self.queues.get(&queue)?.timer
    }

    /// Records the queue's pending timer (or that none is pending). Returns
    /// false when the queue is gone: the caller then stops the timer.
    pub fn set_timer(&mut self, queue: QueueId, timer: Option<Timer>) -> bool {
        match self.queues.get_mut(&queue) {
            Some(q) => {
                q.timer = timer;
                true
            }
            None => false,
        }
    }

    /// The queues of one database, or of all of them.
    pub fn queues_in(&self, db: Option<Db>) -> Vec<QueueId> {
        match db {
            Some(db) => self.by_key.get(&db).map(|keys| keys.values().copied().collect()).unwrap_or_default(),
            None => self.queues.keys().copied().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ROOMY: Caps = Caps { per_key: 100, total: 1000 };

    fn roomy<P>() -> Waiters<P> {
        Waiters::default()
    }

    fn clients_in_order<P>(w: &Waiters<P>, q: QueueId) -> Vec<ClientId> {
        w.queues.get(&q).map(|q| q.waiters.values().map(|w| w.client).collect()).unwrap_or_default()
    }

    #[test]
    fn served_in_arrival_order_and_removable_from_anywhere() {
        let mut w = roomy();
        let q = w.add(0, b"k", 1, 10, None, ROOMY).unwrap();
        assert_eq!(w.add(0, b"k", 2, 20, Some(50), ROOMY).unwrap(), q);
        assert_eq!(w.add(0, b"k", 3, 30, None, ROOMY).unwrap(), q);
        assert_ne!(w.add(1, b"k", 4, 40, None, ROOMY).unwrap(), q, "another database is another key");
        assert_eq!(w.head(q), Some(Head { client: 1, payload: &10 }));
        let middle = w.remove(2).unwrap();
        assert_eq!((middle.payload, middle.was_first, middle.orphan_timer), (20, false, None));
        assert_eq!(clients_in_order(&w, q), vec![1, 3]);
        assert!(w.remove(1).unwrap().was_first);
        assert_eq!(w.head(q), Some(Head { client: 3, payload: &30 }));
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn a_queue_goes_with_its_last_waiter_and_hands_back_its_timer() {
        let mut w = roomy();
        let q = w.add(0, b"k", 1, 0, None, ROOMY).unwrap();
        let timer = Timer { id: 7, due_us: 100 };
        assert!(w.set_timer(q, Some(timer)));
        let removed = w.remove(1).unwrap();
        assert_eq!(removed.orphan_timer, Some(timer));
        assert_eq!((w.queue(0, b"k"), w.head(q), w.key(q)), (None, None, None));
        assert!(!w.set_timer(q, None), "a gone queue takes no timer");
        assert!(w.by_key.is_empty() && w.queues.is_empty() && w.len() == 0);
        assert_ne!(w.add(0, b"k", 1, 0, None, ROOMY).unwrap(), q, "a new queue gets a new id");
    }

    #[test]
    fn deadlines_come_out_earliest_first_from_anywhere_in_the_queue() {
        let mut w = roomy();
        let q = w.add(0, b"k", 1, 0, None, ROOMY).unwrap();
        w.add(0, b"k", 2, 0, Some(300), ROOMY).unwrap();
        w.add(0, b"k", 3, 0, Some(200), ROOMY).unwrap();
        assert_eq!(w.next_deadline(q), Some(200));
        assert_eq!(w.first_expired(q, 199), None);
        assert_eq!(w.first_expired(q, 200).map(|h| h.client), Some(3));
        w.remove(3);
        assert_eq!((w.next_deadline(q), w.first_expired(q, 1000).map(|h| h.client)), (Some(300), Some(2)));
        w.remove(2);
        assert_eq!(w.next_deadline(q), None);
    }

    #[test]
    fn caps_refuse_the_waiter_over_them() {
        let caps = Caps { per_key: 2, total: 3 };
        let mut w = roomy();
        w.add(0, b"a", 1, 0, None, caps).unwrap();
        w.add(0, b"a", 2, 0, None, caps).unwrap();
        assert_eq!(w.add(0, b"a", 3, 0, None, caps), Err(Full::Key));
        w.add(0, b"b", 3, 0, None, caps).unwrap();
        assert_eq!(w.add(0, b"c", 4, 0, None, caps), Err(Full::Total));
        assert_eq!(w.room_for(0, b"c", caps), Err(Full::Total));
        w.remove(1);
        assert_eq!(w.room_for(0, b"a", caps), Ok(()));
        let none_per_key = Caps { per_key: 0, total: 10 };
        assert_eq!(w.room_for(0, b"z", none_per_key), Err(Full::Key), "a per-key cap of 0 refuses every waiter");
    }

    #[test]
    fn adding_a_waiting_client_again_moves_it() {
        let mut w = roomy();
        let a = w.add(0, b"a", 1, 0, Some(5), ROOMY).unwrap();
        let b = w.add(0, b"b", 1, 0, None, ROOMY).unwrap();
        assert_eq!((w.len(), w.queue(0, b"a"), w.next_deadline(a)), (1, None, None));
        assert_eq!(w.head(b).map(|h| h.client), Some(1));
    }

    #[test]
    fn queues_by_database() {
        let mut w = roomy();
        let a = w.add(0, b"a", 1, 0, None, ROOMY).unwrap();
        let b = w.add(0, b"b", 2, 0, None, ROOMY).unwrap();
        let c = w.add(3, b"a", 3, 0, None, ROOMY).unwrap();
        let mut in0 = w.queues_in(Some(0));
        in0.sort();
        assert_eq!(in0, vec![a, b]);
        assert_eq!(w.queues_in(Some(3)), vec![c]);
        assert!(w.queues_in(Some(9)).is_empty());
        assert_eq!(w.queues_in(None).len(), 3);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Add { key: u8, client: u8, deadline: Option<u16> },
        Remove { client: u8 },
        Expire { key: u8, now: u16 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3u8, 0..12u8, proptest::option::of(0..100u16)).prop_map(|(key, client, deadline)| Op::Add {
                key,
                client,
                deadline
            }),
            (0..12u8).prop_map(|client| Op::Remove { client }),
            (0..3u8, 0..100u16).prop_map(|(key, now)| Op::Expire { key, now }),
        ]
    }

    proptest! {
        /// Against a plain list per key: the same order, heads, earliest
        /// deadlines and caps after any sequence of operations.
        #[test]
        fn matches_a_list_model(ops in proptest::collection::vec(op(), 1..80)) {
            let caps = Caps { per_key: 4, total: 7 };
            let mut w: Waiters<u8> = Waiters::default();
            // (key, client, deadline) in arrival order.
            let mut model: Vec<(u8, u8, Option<u64>)> = Vec::new();
            for op in ops {
                match op {
                    Op::Add { key, client, deadline } => {
                        let deadline = deadline.map(u64::from);
                        model.retain(|&(_, c, _)| c != client);
                        let on_key = model.iter().filter(|&&(k, _, _)| k == key).count();
                        let got = w.add(0, &[key], usize::from(client), client, deadline, caps);
                        if model.len() >= caps.total {
                            prop_assert_eq!(got, Err(Full::Total));
                        } else if on_key >= caps.per_key {
                            prop_assert_eq!(got, Err(Full::Key));
                        } else {
                            prop_assert!(got.is_ok());
                            model.push((key, client, deadline));
                        }
                    }
                    Op::Remove { client } => {
                        let position = model.iter().position(|&(_, c, _)| c == client);
                        let removed = w.remove(usize::from(client));
                        prop_assert_eq!(removed.is_some(), position.is_some());
                        if let (Some(removed), Some(i)) = (removed, position) {
                            let (key, _, _) = model.remove(i);
                            let first = model[..i].iter().all(|&(k, _, _)| k != key);
                            prop_assert_eq!(removed.was_first, first);
                        }
                    }
                    Op::Expire { key, now } => {
                        let now = u64::from(now);
                        let want = model
                            .iter()
                            .filter(|&&(k, _, d)| k == key && d.is_some_and(|d| d <= now))
                            .min_by_key(|&&(_, _, d)| d)
                            .map(|&(_, c, _)| usize::from(c));
                        let got = w.queue(0, &[key]).and_then(|q| w.first_expired(q, now)).map(|h| h.client);
                        // Equal deadlines: the earlier arrival comes first.
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(w.len(), model.len());
                for key in 0..3u8 {
                    let in_model: Vec<ClientId> =
                        model.iter().filter(|&&(k, _, _)| k == key).map(|&(_, c, _)| usize::from(c)).collect();
                    let queue = w.queue(0, &[key]);
                    prop_assert_eq!(queue.is_some(), !in_model.is_empty());
                    if let Some(q) = queue {
                        prop_assert_eq!(clients_in_order(&w, q), in_model.clone());
                        prop_assert_eq!(w.head(q).map(|h| h.client), in_model.first().copied());
                        let earliest = model.iter().filter(|&&(k, _, _)| k == key).filter_map(|&(_, _, d)| d).min();
                        prop_assert_eq!(w.next_deadline(q), earliest);
                    }
                }
            }
        }
    }
}
