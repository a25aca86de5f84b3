//! A buffered answer's body as a line hands it over: parts holding their share of the
//! lines' memory budget until the client's side has written them.

use tokio::sync::{mpsc, OwnedSemaphorePermit};

use crate::error::Error;

/// Body bytes of a buffered response, holding their share of the memory budget until the
/// client took them.
pub struct Chunk {
    pub bytes: Vec<u8>,
    _held: OwnedSemaphorePermit,
}

/// A buffered answer's body as its client's side takes it: whole, when it came with its
/// head (most small answers: no channel is made for them), or as the line reads it.
pub struct Body {
    pub(super) whole: Option<Chunk>,
    pub(super) rest: Option<mpsc::UnboundedReceiver<Result<Chunk, Error>>>,
}

impl Body {
    /// The next part if one is at hand (`TryRecvError::Disconnected`: the body has ended).
    pub fn try_recv(&mut self) -> Result<Result<Chunk, Error>, mpsc::error::TryRecvError> {
        if let Some(c) = self.whole.take() {
            return Ok(Ok(c));
        }
        match &mut self.rest {
            Some(rest) => rest.try_recv(),
            None => Err(mpsc::error::TryRecvError::Disconnected),
        }
    }

    /// The next part, waiting for it (`None`: the body has ended).
    pub async fn recv(&mut self) -> Option<Result<Chunk, Error>> {
        if let Some(c) = self.whole.take() {
            return Some(Ok(c));
        }
        self.rest.as_mut()?.recv().await
    }
}

/// The first `n` bytes of `buf` as a body part holding `held`.
pub(super) fn split(buf: &mut Vec<u8>, n: usize, held: OwnedSemaphorePermit) -> Chunk {
    // A part that fills most of the buffer takes it; a smaller one is copied out, so that it
    // holds no more memory than its bytes (what the budget counts) and the buffer keeps its
    // allocation for the next read. (Handing a 1 KiB body over in its 64 KiB buffer cost an
    // allocation of 64 KiB a read, and glibc's consolidation when it was freed.)
    let bytes = if n == buf.len() && n * 2 >= buf.capacity() {
        std::mem::take(buf)
    } else {
        let part = buf[..n].to_vec();
        buf.drain(..n);
        part
    };
    Chunk { bytes, _held: held }
}
