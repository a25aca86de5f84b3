//! The `socks` front end: SOCKS5 (RFC 1928) with username/password (RFC 1929), CONNECT only;
//! BIND and UDP ASSOCIATE are answered "command not supported". The firewall of Maltz &
//! Bhagwat: authenticate, check the rules, log, then splice.

use std::net::SocketAddr;

use splicer_wire::socks5::{
    self, Addr, Command, Greeting, Method, Reply, ReplyCode, Request, UserPass,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::access::Record;
use crate::config::Front;
use crate::error::{Error, Kind, Side};
use crate::policy::Auth;
use crate::shared::Shared;
use crate::upstream::{self, Asker};
use crate::wireio::{read_more, ReadError};

/// Largest handshake message: a request with a 255-byte name is 262 bytes, a full
/// username/password message 513; a client may send them back to back.
const MAX_HANDSHAKE: usize = 1024;

/// Serves one client connection to the end, and logs it.
pub async fn serve(shared: &Shared, mut client: TcpStream, client_addr: SocketAddr) {
    let mut rec = Record::new(Front::Socks, client_addr);
    // The client has `handshake_timeout` for its messages; the upstream connect that follows
    // has `connect_timeout` of its own, and a slow upstream is blamed on the upstream.
    let handshake = tokio::time::timeout(
        shared.config.limits.handshake_timeout,
        handshake(shared, &mut client, &mut rec),
    );
    let (req, early) = match handshake.await {
        Err(_) => {
            rec.fail(&Error::client(Kind::Timeout("handshake")));
            return rec.emit();
        }
        Ok(None) => return rec.emit(),
        Ok(Some(asked)) => asked,
    };
    if let Some((upstream, reply)) = open_upstream(shared, &mut client, &mut rec, &req).await {
        let idle = Some(shared.config.limits.idle_timeout);
        let out = shared
            .relay
            .front(Front::Socks)
            .tunnel(&client, &upstream, &reply, &early, idle)
            .await;
        rec.add_tunnel(&out);
    }
    rec.emit();
}

/// Runs the client's side of the handshake (greeting, login, request); on success returns
/// the CONNECT request and any bytes the client sent after it (optimistic data), which go
/// upstream first.
async fn handshake(
    shared: &Shared,
    client: &mut TcpStream,
    rec: &mut Record,
) -> Option<(Request, Vec<u8>)> {
    let mut buf = Vec::with_capacity(64);
    let greeting = match read_msg(client, &mut buf, Greeting::parse).await {
        Ok(g) => g,
        Err(e) => {
            rec.fail(&e);
            return None;
        }
    };
    let method = if shared.policy.auth_required() {
        Method::UserPass
    } else {
        Method::NoAuth
    };
    if !greeting.offers(method) {
        let _ = client
            .write_all(&socks5::encode_method_selection(Method::NoAcceptable))
            .await;
        rec.fail(&Error::client(Kind::Refused("no-acceptable-method")));
        return None;
    }
    client
        .write_all(&socks5::encode_method_selection(method))
        .await
        .ok()?;
    if method == Method::UserPass {
        let up = match read_msg(client, &mut buf, UserPass::parse).await {
            Ok(up) => up,
            Err(e) => {
                rec.fail(&e);
                return None;
            }
        };
        rec.user = Some(String::from_utf8_lossy(up.user()).into_owned());
        let auth = shared
            .policy
            .authenticate(rec.client.ip(), up.user(), up.pass())
            .await;
        let ok = matches!(auth, Auth::Ok(_));
        let _ = client.write_all(&socks5::encode_auth_reply(ok)).await;
        match auth {
            Auth::Ok(_) => {}
            Auth::Throttled => {
                rec.fail(&Error::client(Kind::Refused("auth-throttled")));
                return None;
            }
            Auth::Failed | Auth::Missing => {
                rec.fail(&Error::client(Kind::Refused("auth-failed")));
                return None;
            }
        }
    }
    let req = match read_msg(client, &mut buf, Request::parse).await {
        Ok(r) => r,
        Err(e) => {
            // An unknown address type has its own reply code; other garbage just closes.
            // Parsing is pure: the same bytes say again why they were refused.
            if matches!(Request::parse(&buf), Err(socks5::Error::AddressType(_))) {
                reply(client, rec, ReplyCode::AddressTypeNotSupported).await;
            }
            rec.fail(&e);
            return None;
        }
    };
    rec.method = req.command.name().to_string();
    rec.destination = format!("{}:{}", req.addr, req.port);
    if req.command != Command::Connect {
        reply(client, rec, ReplyCode::CommandNotSupported).await;
        rec.fail(&Error::client(Kind::Refused("command-not-supported")));
        return None;
    }
    Some((req, buf))
}

/// Connects upstream for `req` under `limits.connect_timeout` and builds the success reply;
/// on failure answers the client with the reply code for it. Returns the upstream
/// connection and the reply when the relay writes it (a kernel engine splices before it;
/// otherwise it is written here and none is returned).
async fn open_upstream(
    shared: &Shared,
    client: &mut TcpStream,
    rec: &mut Record,
    req: &Request,
) -> Option<(TcpStream, Vec<u8>)> {
    let host = match &req.addr {
        Addr::V4(a) => a.to_string(),
        Addr::V6(a) => a.to_string(),
        Addr::Domain(d) => d.clone(),
    };
    let asker = Asker {
        client: rec.client.ip(),
        user: rec.user.as_deref(),
    };
    let limits = &shared.config.limits;
    match upstream::connect(
        &shared.policy,
        asker,
        &host,
        req.port,
        upstream::Dial {
            timeout: limits.connect_timeout,
            socket: shared.relay.tunnel_upstream(client),
            receive_buffer: limits.receive_buffer,
        },
    )
    .await
    {
        Err(e) => {
            reply(client, rec, e.socks_reply()).await;
            rec.fail(&Error::from(e));
            None
        }
        Ok(up) => {
            let bound = up.local_addr().ok()?;
            let ok = Reply {
                code: ReplyCode::Succeeded,
                addr: Addr::from(bound),
                port: bound.port(),
            };
            let mut out = Vec::with_capacity(22);
            ok.encode(&mut out);
            rec.status = 0;
            // The relay writes it, when the engine it picks needs (after setting the
            // splice up).
            let _ = client.set_nodelay(true);
            Some((up, out))
        }
    }
}

async fn reply(client: &mut TcpStream, rec: &mut Record, code: ReplyCode) {
    rec.status = u16::from(code.to_byte());
    let mut out = Vec::with_capacity(10);
    Reply::failure(code).encode(&mut out);
    let _ = client.write_all(&out).await;
}

/// Reads until `parse` yields a message, consuming its bytes from `buf`.
async fn read_msg<T>(
    client: &TcpStream,
    buf: &mut Vec<u8>,
    parse: fn(&[u8]) -> Result<splicer_wire::Parsed<T>, socks5::Error>,
) -> Result<T, Error> {
    loop {
        match parse(buf) {
            Ok(Some((v, n))) => {
                buf.drain(..n);
                return Ok(v);
            }
            Ok(None) => {}
            Err(e) => {
                return Err(Error::malformed(
                    Side::Client,
                    format!("bad-handshake: {e}"),
                ))
            }
        }
        read_more(client, buf, MAX_HANDSHAKE)
            .await
            .map_err(|e| match e {
                ReadError::Closed => Error::client(Kind::Closed("handshake")),
                ReadError::TooLarge => Error::client(Kind::TooLarge("handshake")),
                ReadError::Io(k) => Error::client(Kind::Read(k)),
            })?;
    }
}
