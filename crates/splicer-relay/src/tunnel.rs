//! A tunnel: two splices, client → upstream ("up") and upstream → client ("down"), until
//! both are finished. EOF is passed on as a half-close; a reset or error on one side resets
//! the other, so failures stay visible end to end.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use splicer_sys::sock::{set_linger_zero, shutdown_write};
use tokio::net::TcpStream;

use crate::engine::{self, Chosen, Engine, Needs, UserSpace};
use crate::io::Activity;
use crate::outcome::{End, Outcome, TunnelOutcome};
use crate::pacer::Class;
use crate::splice::SpliceSpec;
use crate::Relay;

/// Who may be sending while a tunnel is being set up: a kernel engine that cannot take
/// bytes from both sockets at once during its set-up orders it by this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// SOCKS and CONNECT: the client waits for the reply owed to it; the server may speak
    /// first (a banner), but most wait for the client.
    Tunnel,
    /// An answer to the end of the connection: the upstream is sending its body, the client
    /// waits for it.
    Answer,
}

impl Start {
    /// The pacer's class: an answer is a body, whichever engine moves it.
    fn class(self) -> Class {
        match self {
            Start::Tunnel => Class::Tunnels,
            Start::Answer => Class::Bodies,
        }
    }
}

impl Relay {
    /// Runs a tunnel between `client` and `upstream`. `reply` is what the front end still
    /// owes the client before the tunnel (the SOCKS reply, `200 Connection established`):
    /// the relay writes it, at the moment its engine needs (`ipsplice` splices before it).
    /// `client_prefix` holds bytes already read from the client (e.g. sent right after a
    /// CONNECT) that go upstream first. The tunnel is idle only when neither direction
    /// moved a byte for `idle`.
    pub async fn tunnel(
        &self,
        client: &TcpStream,
        upstream: &TcpStream,
        reply: &[u8],
        client_prefix: &[u8],
        idle: Option<Duration>,
    ) -> TunnelOutcome {
        self.tunnel_from(
            Start::Tunnel,
            (client, upstream),
            reply,
            client_prefix,
            idle,
        )
        .await
    }

    /// Runs an HTTP answer to the end of both connections as a tunnel (seed 000's splice):
    /// `lead` (the head the client gets and the body bytes already read) goes to the client
    /// first, then everything the upstream sends. Unlike [`Relay::tunnel`]'s peers, the
    /// upstream is sending all along (the body is in flight) and the client waits for it,
    /// which decides the order of a kernel engine's set-up.
    pub async fn answer_to_the_end(
        &self,
        client: &TcpStream,
        upstream: &TcpStream,
        lead: &[u8],
        idle: Option<Duration>,
    ) -> TunnelOutcome {
        self.tunnel_from(Start::Answer, (client, upstream), lead, &[], idle)
            .await
    }

    async fn tunnel_from(
        &self,
        start: Start,
        (client, upstream): (&TcpStream, &TcpStream),
        reply: &[u8],
        client_prefix: &[u8],
        idle: Option<Duration>,
    ) -> TunnelOutcome {
        let chosen = engine::choose(
            self.config().engine,
            Needs::TUNNEL,
            self.ipsplice_loaded(),
            0,
        );
        let class = start.class();
        // The kernel engines write the reply themselves, at the moment their set-up needs
        // (so that the client cannot send meanwhile); they may decline and leave the rest.
        let declined = match chosen {
            Engine::Sockmap | Engine::Ipsplice => {
                let kernel = self.kernel();
                // Paced as the class is, through the engine's own means (sockets'
                // pacing for `sockmap`, window clamps for `ipsplice`).
                let pacing = (self.pacer(), (self.front_end(), class), self.cut_called());
                let run = kernel.tunnel(
                    (chosen, start),
                    (client, upstream),
                    (reply, client_prefix),
                    idle,
                    self.sockmap_gate(),
                    (self.cut_called(), pacing),
                );
                match run.await {
                    Ok((o, early)) => {
                        if early {
                            self.counters().early();
                        }
                        return self.count(o);
                    }
                    Err(d) => Some(d),
                }
            }
            Engine::Copy | Engine::Pipe => None,
        };
        // The user-space engines, from where the declined engine (if any) left off: the one
        // chosen runs both directions, with the decline's reason as its fallback.
        let (reply, prefix, moved, user) = match declined {
            Some(d) => {
                tracing::debug!(reason = %d.reason, "tunnel falls back to pipe");
                self.counters().declined(chosen);
                let reply = if d.reply_sent { &[][..] } else { reply };
                let user = Chosen {
                    engine: UserSpace::Pipe,
                    fallback: Some(d.reason),
                };
                (reply, &client_prefix[d.prefix_sent..], d.moved, user)
            }
            None => {
                let user = Chosen {
                    engine: UserSpace::standing_for(chosen),
                    fallback: None,
                };
                (reply, client_prefix, (0, 0), user)
            }
        };
        if let Err(e) = crate::io::write_all(client, reply).await {
            let mut o = reply_failed(user.engine.engine(), e);
            o.down.fallback = user.fallback;
            return self.count(o);
        }
        let mut o = self
            .user_space_tunnel((client, upstream), prefix, idle, (user, class))
            .await;
        o.up.bytes += moved.0;
        o.down.bytes += moved.1;
        self.count(o)
    }

    fn count(&self, o: TunnelOutcome) -> TunnelOutcome {
        self.counters()
            .tunnel(o.up.engine, o.up.bytes + o.down.bytes);
        o
    }

    /// The tunnel with engines that run in the proxy process (`copy`, `pipe`).
    async fn user_space_tunnel(
        &self,
        (client, upstream): (&TcpStream, &TcpStream),
        client_prefix: &[u8],
        idle: Option<Duration>,
        (user, class): (Chosen, Class),
    ) -> TunnelOutcome {
        let activity = Activity::new();
        let (up_moved, down_moved) = (AtomicU64::new(0), AtomicU64::new(0));
        let spec = SpliceSpec {
            max: None,
            idle,
            ..SpliceSpec::default()
        };
        let up = self.run_splice(
            (client, upstream),
            client_prefix,
            spec,
            (&activity, &up_moved),
            (user.clone(), class),
            None,
        );
        let down = self.run_splice(
            (upstream, client),
            &[],
            spec,
            (&activity, &down_moved),
            (user, class),
            None,
        );
        tokio::pin!(up, down);
        let (mut up_out, mut down_out): (Option<Outcome>, Option<Outcome>) = (None, None);
        loop {
            // `true` when this direction's end stops the whole tunnel.
            let stop = tokio::select! {
                o = &mut up, if up_out.is_none() => finish(&o, client, upstream, &mut up_out),
                o = &mut down, if down_out.is_none() => finish(&o, upstream, client, &mut down_out),
            };
            if stop || (up_out.is_some() && down_out.is_some()) {
                break;
            }
        }
        // A direction still running was stopped by the other: report what it had moved.
        let stopped = |out: Option<Outcome>, moved: &AtomicU64, other: &Option<Outcome>| {
            out.unwrap_or_else(|| {
                // The loop above ends only when a direction finished (`stop` is set by one).
                #[allow(clippy::expect_used)]
                let first = other.as_ref().expect("one direction finished");
                Outcome {
                    engine: first.engine,
                    fallback: first.fallback.clone(),
                    bytes: moved.load(Ordering::Relaxed),
                    end: match first.end {
                        End::Idle | End::Cut => first.end,
                        _ => End::Aborted,
                    },
                }
            })
        };
        let up_final = stopped(up_out.clone(), &up_moved, &down_out);
        let down_final = stopped(down_out, &down_moved, &up_out);
        TunnelOutcome {
            up: up_final,
            down: down_final,
        }
    }
}

/// The reply owed to the client could not be written: the tunnel ends before it began.
pub(crate) fn reply_failed(engine: crate::Engine, e: std::io::Error) -> TunnelOutcome {
    let end = |end| Outcome {
        engine,
        fallback: None,
        bytes: 0,
        end,
    };
    TunnelOutcome {
        up: end(End::Aborted),
        down: end(End::Destination(e.kind())),
    }
}

/// Applies the end of one direction (`from` → `to`) to the sockets; returns whether the
/// whole tunnel must stop.
fn finish(o: &Outcome, from: &TcpStream, to: &TcpStream, slot: &mut Option<Outcome>) -> bool {
    *slot = Some(o.clone());
    match o.end {
        End::Eof | End::Max => {
            // Half-close: the other direction keeps flowing. If `to` is already gone the
            // other direction will see the error itself.
            let _ = shutdown_write(to.as_fd());
            false
        }
        End::Idle | End::Aborted | End::Cut => true,
        End::Source(_) => {
            // The source failed (reset): make the destination see a reset too.
            let _ = set_linger_zero(to.as_fd());
            true
        }
        End::Destination(_) => {
            let _ = set_linger_zero(from.as_fd());
            true
        }
    }
}
