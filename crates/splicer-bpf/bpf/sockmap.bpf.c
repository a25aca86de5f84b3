// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
// The sockmap engine's verdict program (socket-level splice, seed 000): every skb that
// arrives on a spliced socket is redirected, inside the kernel, to the send side of its
// partner. The proxy inserts both sockets of a tunnel in `socks` and records each one's partner
// in `partners` (socket cookie -> key of the partner in `socks`). There is no stream parser: the
// verdict runs on each skb as TCP queued it (tcp_read_skb), after the overlap with bytes
// already consumed is cut off (trim_overlap).
//
// One-way splices (an HTTP response body) put their destination in `targets` instead, a map
// no program is attached to: what the destination receives itself (the client's next
// request) stays on its own receive queue, unread, for the proxy. Their source may carry a
// bound (`bounds`): the body's length, past which nothing is redirected.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32); /* a socket descriptor, on insertion */
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} partners SEC(".maps");

// Destinations of one-way splices (keys as in `socks`): no program runs for them.
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} targets SEC(".maps");

// A one-way splice's bound, keyed by its source's cookie. `remaining`: bytes of the body
// not yet handed on (redirected, or held by the gate for the proxy). The skb that would
// reach or cross it is not redirected (a verdict cannot redirect part of an skb and keep
// the rest, and passing it wakes the proxy): it is passed whole to the source's own
// receive side, `reached` is set, and from then on every skb is passed too and counted in
// `beyond`. The proxy reads the body's last `remaining`
// bytes from the socket itself once everything redirected is in the destination's TCP;
// what is beyond them came after the body (for a response: bytes the origin should never
// have sent).
struct bound {
	__u64 remaining;
	__u64 beyond;
	__u32 reached;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct bound);
} bounds SEC(".maps");

// Sockets whose skbs could not be redirected (their partner not yet, or no longer, in
// `socks`, or a failed cut): cookie -> skbs kept for the proxy. A non-zero count means
// bytes may be missing from or out of order in what was redirected, so nothing more of
// that socket is redirected and the proxy resets the pair rather than deliver them.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} passed SEC(".maps");

static int keep(__u64 cookie)
{
	__u64 one = 1, *n = bpf_map_lookup_elem(&passed, &cookie);

	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&passed, &cookie, &one, BPF_NOEXIST);
	return SK_PASS;
}

// Kernel types read with CO-RE (the loader relocates the field offsets against the
// running kernel's BTF): only the fields used here are declared.
struct sk_buff {
	char cb[48];
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 copied_seq;
	__u32 write_seq;
	__u32 snd_una;
} __attribute__((preserve_access_index));

// Back-pressure, per direction, keyed by the source's cookie (present when the proxy set a
// bound). The kernel's redirect takes every skb off the source's receive queue at once, so
// the source's window never closes and a destination slower than its source piles bytes up
// in the partner's redirect queue without bound. The gate counts the bytes redirected
// since `base` (the destination's `write_seq` when that count was 0); what the redirect
// queue holds is those less what reached the destination's TCP since. Past `limit` the
// gate closes: every later skb is passed to the source's own receive side instead (its
// receive buffer then fills and its window closes, as TCP's back-pressure does), and the
// proxy relays those bytes itself, in order, after the redirect queue has drained. It
// counts them in `resumes`; when that count equals `held` at the next skb (nothing passed
// is left unread), the gate opens again with a fresh base. Only this program writes a gate
// once the proxy inserted it; only the proxy writes `resumes`.
struct gate {
	__u64 limit;
	__u64 redirected;
	__u64 held;
	__u32 base;
	__u32 based;
	__u32 closed;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct gate);
} gates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} resumes SEC(".maps");

// What the program did, for the proxy's counters and the tests: [0] skbs trimmed, [1]
// bytes trimmed, [2] trims that failed (the tunnel then gets a reset, never wrong bytes),
// [3] bare FINs (skbs without data) not redirected, [4] times a gate closed.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 5);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static void count(__u32 i, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &i);

	if (v)
		__sync_fetch_and_add(v, n);
}

// The largest cut `bpf_skb_adjust_room` makes at once on an sk_skb.
#define MAX_CUT 0xfff

// Takes off the front of `skb` the bytes the socket already consumed. TCP queues a
// segment that partly overlaps what was already received whole, its sequence number
// before the socket's `copied_seq` (tcp_data_queue, tcp_ofo_queue). The verdict path of
// Linux 6.18 (tcp_read_skb) hands such an skb over whole, so without this the overlap is
// sent twice, and tcp_eat_skb then moves `copied_seq` past the bytes received.
enum trim { TRIM_FAILED, TRIM_KEPT_SOME, TRIM_EMPTIED };

// How far each socket's stream has been handed on by this program (redirected or held),
// as a sequence number: cookie -> the end of the last skb it took. Held skbs wait unread on
// the socket's receive side, so `copied_seq` stays behind them until the proxy reads them;
// a partly overlapping retransmission cut against `copied_seq` alone then went out twice
// (56 bytes too many in the lab's lossy bulk test, with the gate closed).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} handed_on SEC(".maps");

static enum trim trim_overlap(struct __sk_buff *ctx, __u64 cookie)
{
	struct sk_buff *skb = (void *)ctx;
	struct bpf_sock *bsk = ctx->sk;
	struct tcp_sock *tp;
	__u32 seq = 0, from, end, *done;
	__s32 overlap;

	if (!bsk)
		return TRIM_KEPT_SOME;
	tp = bpf_skc_to_tcp_sock(bsk);
	if (!tp)
		return TRIM_KEPT_SOME;
	// TCP_SKB_CB(skb)->seq: the first field of the TCP control block, at the start of
	// skb->cb (the part sk_skb programs leave to the protocol).
	if (bpf_probe_read_kernel(&seq, sizeof(seq), &skb->cb[0]))
		return TRIM_FAILED;
	// What came before is what the socket consumed or this program took, whichever
	// reaches further.
	from = tp->copied_seq;
	done = bpf_map_lookup_elem(&handed_on, &cookie);
	if (done && (__s32)(*done - from) > 0)
		from = *done;
	end = seq + ctx->len;
	if (!done || (__s32)(end - *done) > 0)
		bpf_map_update_elem(&handed_on, &cookie, &end, BPF_ANY);
	overlap = (__s32)(from - seq);
	if (overlap <= 0)
		return TRIM_KEPT_SOME;
	if ((__u32)overlap > ctx->len)
		overlap = ctx->len;
	if (overlap == 0)
		return TRIM_KEPT_SOME;
	count(0, 1);
	count(1, overlap);
	// A GRO'd skb is at most 64 KiB: 17 cuts of 0xfff cover it.
	for (int i = 0; i < 17 && overlap > 0; i++) {
		__s32 cut = overlap > MAX_CUT ? MAX_CUT : overlap;

		if (bpf_skb_adjust_room(ctx, -cut, 0, 0))
			return TRIM_FAILED;
		overlap -= cut;
	}
	if (overlap > 0)
		return TRIM_FAILED;
	return ctx->len ? TRIM_KEPT_SOME : TRIM_EMPTIED;
}

enum pace { REDIRECT, HOLD, FAIL };

// Whether this skb of `cookie`, bound for the socket at `partner` in `dsts` (`socks` or
// `targets`), may be redirected now (`gate` above), and its count if so. Inlined: the
// verifier then knows which map each call looks the partner up in.
static __always_inline enum pace pace(__u64 cookie, __u64 *partner, __u32 len, void *dsts)
{
	struct gate *g = bpf_map_lookup_elem(&gates, &cookie);
	struct bpf_sock *dst;
	struct tcp_sock *tp;
	enum pace p = REDIRECT;

	if (!g)
		return REDIRECT;
	if (g->closed) {
		__u64 *resumed = bpf_map_lookup_elem(&resumes, &cookie);

		if (!resumed || *resumed != g->held) {
			g->held += len;
			return HOLD;
		}
		// Everything held was relayed by the proxy: its bytes are in the destination's
		// TCP ahead of this one, and the redirect queue is empty.
		g->closed = 0;
		g->based = 0;
		g->redirected = 0;
	}
	dst = bpf_map_lookup_elem(dsts, partner);
	if (!dst)
		return FAIL;
	tp = bpf_skc_to_tcp_sock(dst);
	if (!tp) {
		p = FAIL;
		goto out;
	}
	if (!g->based) {
		g->base = tp->write_seq;
		g->based = 1;
	}
	// Bytes redirected and not yet handed to the destination's TCP.
	if (g->redirected - (__u32)(tp->write_seq - g->base) + len > g->limit) {
		g->closed = 1;
		g->held += len;
		count(4, 1);
		p = HOLD;
		goto out;
	}
	g->redirected += len;
out:
	bpf_sk_release(dst);
	return p;
}

// An skb of a one-way splice's source (`bounds` above), toward its partner in `targets`.
static __always_inline int one_way(struct __sk_buff *skb, __u64 cookie, __u64 *partner,
				   struct bound *b)
{
	__u32 len = skb->len;

	if (b->reached || len >= b->remaining) {
		// The skb that ends the body, or crosses its end, and any after it: the proxy
		// reads them from the socket. Passing the last one even when it ends the body
		// exactly is what wakes the proxy (bytes on the source's own side make it
		// readable; redirected ones do not), at the cost of its bytes through user space.
		b->reached = 1;
		__sync_fetch_and_add(&b->beyond, len);
		return SK_PASS;
	}
	switch (pace(cookie, partner, len, &targets)) {
	case HOLD:
		// Held by the gate: still body, relayed by the proxy in order.
		break;
	case FAIL:
		return keep(cookie);
	case REDIRECT:
		if (bpf_sk_redirect_hash(skb, &targets, partner, 0) != SK_PASS)
			return keep(cookie);
		break;
	}
	b->remaining -= len;
	return SK_PASS;
}

SEC("sk_skb/stream_verdict")
int splice_verdict(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	__u64 *partner = bpf_map_lookup_elem(&partners, &cookie);

	if (!partner)
		return keep(cookie);
	// A FIN without data (tcp_read_skb hands the verdict the FIN's skb too). Redirected, it
	// would reach the partner's backlog as an empty skb, whose send returns 0, which the
	// backlog takes for a broken pipe: it records EPIPE on the partner, a socket nothing
	// is wrong with, and stops its sending. The proxy passes FINs on itself
	// (shutdown(SHUT_WR) once every byte is acknowledged). Dropped at length 0, it moves
	// no byte of `copied_seq`.
	if (skb->len == 0) {
		count(3, 1);
		return SK_DROP;
	}
	// Once an skb of this socket was kept for the proxy, a later one must not overtake it:
	// keep those too. The proxy resets the pair when it sees the count.
	if (bpf_map_lookup_elem(&passed, &cookie))
		return keep(cookie);
	switch (trim_overlap(skb, cookie)) {
	case TRIM_FAILED:
		count(2, 1);
		return keep(cookie);
	case TRIM_EMPTIED:
		// Nothing new in it (TCP drops such segments before queueing them, so this is
		// a guard). Not redirected: an empty skb on the partner's backlog ends its sending
		// with EPIPE. Dropped at length 0, it leaves `copied_seq` where it is.
		return SK_DROP;
	case TRIM_KEPT_SOME:
		break;
	}
	struct bound *b = bpf_map_lookup_elem(&bounds, &cookie);

	if (b)
		return one_way(skb, cookie, partner, b);
	switch (pace(cookie, partner, skb->len, &socks)) {
	case HOLD:
		// To the source's own receive side, for the proxy (not counted in `passed`:
		// nothing is wrong).
		return SK_PASS;
	case FAIL:
		return keep(cookie);
	case REDIRECT:
		break;
	}
	// Flags 0: onto the partner's send queue (egress), as a relay would write it. A failed
	// redirect would drop the skb (SK_DROP): keep it for the proxy instead.
	if (bpf_sk_redirect_hash(skb, &socks, partner, 0) != SK_PASS)
		return keep(cookie);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
