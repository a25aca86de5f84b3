//! The `copy` engine: `read` into a pooled buffer, `write` it out.

use std::io;

use crate::io::Job;
use crate::outcome::End;
use crate::pool::BufferPool;
use crate::tap::Tap;

/// Runs the splice; `tap` gets each chunk read before it is written.
pub(crate) async fn run(
    buffers: &BufferPool,
    job: &mut Job<'_>,
    mut tap: Option<&mut dyn Tap>,
) -> End {
    loop {
        if job.next_len(1) == 0 {
            return End::Max;
        }
        if let Err(end) = job.readable().await {
            return end;
        }
        // Taken only now that bytes are waiting; given back when the source is drained.
        let mut buf = buffers.take();
        loop {
            let want = job.next_len(buf.len());
            if want == 0 {
                return End::Max;
            }
            // A paced class reads no faster than its rate: its source's window closes.
            let want = job.paced(want).await;
            match crate::io::read_once(job.from, &mut buf[..want]) {
                Ok(0) => return End::Eof,
                Ok(n) => {
                    job.unread(want - n);
                    if let Some(t) = tap.as_mut() {
                        if !t.tap(&buf[..n]) {
                            tap = None;
                        }
                    }
                    if let Err(end) = job.write_all(&buf[..n]).await {
                        return end;
                    }
                    if n < want {
                        // Drained (read_once cleared the readiness): give the buffer back.
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    job.unread(want);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => job.unread(want),
                Err(e) => return End::Source(e.kind()),
            }
        }
    }
}
