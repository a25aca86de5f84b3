//! CONNECT host:port → `200 Connection established`, then a tunnel.

use splicer_wire::http::{Authority, RequestHead};

use crate::access::Record;
use crate::config::HttpConfig;
use crate::error::{Error, Kind, Side};
use crate::exchange::{reply, Client};
use crate::shared::Shared;
use crate::upstream::{self, Asker, Dial};

pub(crate) async fn connect(
    shared: &Shared,
    http: &HttpConfig,
    client: &mut Client,
    head: RequestHead,
    rec: &mut Record,
) {
    let authority = match Authority::parse(&head.target, None) {
        Ok(a) => a,
        Err(e) => {
            reply::error(client, rec, 400, &Error::unparsable(Side::Client, e)).await;
            return;
        }
    };
    rec.destination = authority.to_string();
    if !http.connect_ports.contains(&authority.port) {
        reply::error(
            client,
            rec,
            403,
            &Error::client(Kind::Refused("connect-port-denied")),
        )
        .await;
        return;
    }
    let user = rec.user.clone();
    let asker = Asker {
        client: client.addr.ip(),
        user: user.as_deref(),
    };
    let upstream = match upstream::connect(
        &shared.policy,
        asker,
        &authority.host,
        authority.port,
        Dial::new(
            &shared.config.limits,
            shared.relay.tunnel_upstream(&client.stream),
        ),
    )
    .await
    {
        Ok(u) => u,
        Err(e) => {
            reply::connect_error(client, rec, e).await;
            return;
        }
    };
    rec.status = 200;
    // The relay writes it, when the engine it picks needs (after setting the splice up).
    let ok: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";
    let early = std::mem::take(&mut client.buf);
    let out = shared
        .relay
        .front(rec.front)
        .tunnel(
            &client.stream,
            &upstream,
            ok,
            &early,
            Some(shared.config.limits.idle_timeout),
        )
        .await;
    rec.add_tunnel(&out);
    rec.emit();
}
