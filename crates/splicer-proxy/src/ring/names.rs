//! Names resolved for the rings: `getaddrinfo` blocks, so a ring never calls it. A
//! forward-proxy request to a name that the ring's pool has no idle connection for is
//! asked here (`Names::ask`); one of a few threads resolves it and posts the addresses to
//! the ring's mailbox, whose `eventfd` wakes the ring. A lookup that does not come back
//! within the connect timeout gets the ring's 504, the runtimes' answer to a destination
//! not reached in time (`conn::ends`); its late answer is dropped.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{mpsc, Arc, Mutex};

use super::Mailbox;

/// Threads resolving names for all the rings: a slow name holds one, not a ring.
const THREADS: usize = 4;

/// A name to resolve for connection `at` of the ring whose mailbox is `reply`.
pub(super) struct Job {
    pub host: String,
    pub port: u16,
    pub at: usize,
    /// Tells this lookup's answer from an earlier one's for the same place.
    pub token: u64,
    pub reply: Arc<Mailbox>,
}

/// A lookup's answer, for the ring's loop.
pub(super) struct Resolved {
    pub at: usize,
    pub token: u64,
    pub addrs: std::io::Result<Vec<SocketAddr>>,
}

/// Where the rings send names; the threads end when every ring has dropped its copy.
#[derive(Clone)]
pub(super) struct Names(mpsc::Sender<Job>);

impl Names {
    pub(super) fn start() -> std::io::Result<Names> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..THREADS {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("splicer-names-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    };
                    let addrs = (job.host.as_str(), job.port)
                        .to_socket_addrs()
                        .map(Iterator::collect);
                    let done = Resolved {
                        at: job.at,
                        token: job.token,
                        addrs,
                    };
                    job.reply
                        .resolved
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(done);
                    job.reply.wake.signal();
                })?;
        }
        Ok(Names(tx))
    }

    /// Queues `job`; `false` when the threads are gone.
    pub(super) fn ask(&self, job: Job) -> bool {
        self.0.send(job).is_ok()
    }
}
