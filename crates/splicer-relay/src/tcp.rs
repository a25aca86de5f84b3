//! TCP facts the engines read from `TCP_INFO`, shared by them.

// Most are for the kernel engines, left out without the `bpf` feature.
#![cfg_attr(not(feature = "bpf"), allow(dead_code))]

/// `TCP_ESTABLISHED`, the `tcpi_state` of a connection that has received no FIN.
pub(crate) const TCP_ESTABLISHED: u8 = 1;

/// `TCP_CLOSE` in `tcpi_state`: a reset, a timeout, or both ends closed.
pub(crate) const TCP_CLOSE: u8 = 7;

/// Whether a connection in `tcpi_state` `state` has received its peer's FIN (which then
/// counts one in `tcpi_bytes_received`): CLOSE_WAIT, LAST_ACK, CLOSING, TIME_WAIT, and
/// CLOSE, which LAST_ACK leaves for once its own FIN is acknowledged (a reset leads there
/// too, without a FIN: a count one short on a connection that failed anyway).
pub(crate) fn fin_received(state: u8) -> bool {
    matches!(state, 6 | 7 | 8 | 9 | 11)
}

/// `TCPI_OPT_TIMESTAMPS` in `tcpi_options`.
pub(crate) const OPT_TIMESTAMPS: u8 = 1;

/// `TCPI_OPT_ECN` in `tcpi_options`.
pub(crate) const OPT_ECN: u8 = 8;

/// `TCPI_OPT_USEC_TS`: TSvals in µs (a route attribute); the clock learning of the early
/// `ipsplice` take-over counts in ms.
pub(crate) const OPT_USEC_TS: u8 = 64;

/// Bytes of TCP options in every segment when timestamps are on.
pub(crate) const TS_OPTION: u32 = 12;
