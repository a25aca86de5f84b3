//! A line registered before its connection is open: requests queue on it while it
//! connects, and it leaves the registry if it never gets one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};

use super::{remove, Chosen, Job, Line, Pool, Run, Settings};

/// A line registered while its connection opens ([`Pipelines::open`]).
pub struct Opening {
    pub(super) lines: Arc<Mutex<HashMap<String, Vec<Arc<Line>>>>>,
    pub(super) budget: Arc<Semaphore>,
    pub(super) origin: String,
    pub(super) line: Arc<Line>,
    pub(super) settings: Settings,
    /// Taken when the line runs; still here on drop: the line never ran.
    pub(super) rx: Option<mpsc::UnboundedReceiver<Job>>,
}

impl Opening {
    /// Runs the line on its connection (`reused`: taken from the pool).
    pub fn run(
        mut self,
        (upstream, addr, reused): (TcpStream, SocketAddr, bool),
        pool: Arc<Pool>,
    ) -> Chosen {
        let line = self.line.clone();
        if let Some(rx) = self.rx.take() {
            let run = Run {
                lines: self.lines.clone(),
                budget: self.budget.clone(),
                origin: std::mem::take(&mut self.origin),
                line: line.clone(),
                settings: self.settings,
                reused,
            };
            tokio::spawn(run.go(upstream, addr, rx, pool));
        }
        Chosen(line)
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if self.rx.is_some() {
            // No connection: out of the registry; the jobs queued meanwhile are dropped
            // with the receiver, and their senders ask again (`Reply` never comes).
            let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
            remove(&mut lines, &self.origin, self.line.id);
        }
    }
}
