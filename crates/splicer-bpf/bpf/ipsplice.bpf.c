// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
// The ipsplice engine's TC ingress program (IP-level splice, seed 003). The proxy accepted
// a client (leg A) and connected upstream (leg B); once both are spliced, every packet of
// one leg that reaches the proxy is rewritten into the other leg's addresses, ports and
// sequence space and sent out like a router would, so the endpoints talk TCP end to end and
// the proxy's own sockets are out of the way.
//
// `flows` is keyed by a packet's 4-tuple as it arrives (one entry per direction). An entry
// goes through three modes, set by the proxy:
// - OBSERVE: pass the packet to the proxy's socket, recording the sender's last TSval (no
//   socket option exposes it, docs/kernel-notes.md) and the highest sequence seen;
// - FREEZE: while the proxy takes its snapshot, drop new data (it will be resent by the
//   endpoint) but pass pure ACKs, resets and retransmissions of data already seen, so the
//   proxy's queues can drain;
// - ACTIVE: rewrite MACs (FIB lookup), addresses, ports, seq/ack, window (rescaled between
//   the legs' window scales), TSval/TSecr and SACK edges, fix the checksums incrementally
//   and redirect; FIN and RST are recorded for the proxy, which removes finished flows.
//
// An entry activated before its endpoint sent anything (the proxy splices before it writes
// the SOCKS or CONNECT reply) does not know the endpoint's TSval yet: with `learn` set, the
// first packet sets the TSval delta so that it continues the proxy's clock on the other leg
// (`ts_off`: that socket's TSval is ms of CLOCK_MONOTONIC plus it), and the other
// direction's entry then echoes TSvals back with the inverse delta.
//
// The pacer slows a spliced direction by clamping the window its receiver advertises, in
// the other direction's packets (`pace`: a slot of `clamps`, where user space writes the
// most bytes the sender may have in flight; 0 there is no clamp). A window-limited sender
// sends a window a round trip, so a clamp is a rate; user space steers it toward the rate
// it wants from the bytes counted here (docs/pacer.md).
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/in.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2

#define MODE_OBSERVE 0
#define MODE_FREEZE 1
#define MODE_ACTIVE 2

// flow.flags
#define F_FIN 1
#define F_RST 2
// flow.seen
#define SEEN_TSVAL 1
#define SEEN_SEQ 2
#define SEEN_ACK 4

struct key {
	__u32 saddr; /* network order, like the packet */
	__u32 daddr;
	__u16 sport;
	__u16 dport;
};

// Keep in step with `Flow` in src/ipsplice.rs.
struct flow {
	// The packet's new 4-tuple (network order).
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	// Interface to send the rewritten packet out of.
	__u32 oif;
	// Added (mod 2^32) to seq; to ack and SACK edges; to TSval; to a non-zero TSecr.
	__u32 seq_delta;
	__u32 ack_delta;
	__u32 tsval_delta;
	__u32 tsecr_delta;
	// Window: value << wscale_in >> wscale_out (the legs' scales), capped at 65535.
	__u8 wscale_in;
	__u8 wscale_out;
	__u8 mode;
	__u8 flags;
	// Highest end of data seen from the source (host order), valid with SEEN_SEQ.
	__u32 seq_max;
	// Last TSval from the source (host order), valid with SEEN_TSVAL.
	__u32 last_tsval;
	__u32 seen;
	// Highest ACK from the source, before rewriting (host order), valid with SEEN_ACK: tells
	// the proxy when the endpoint has the reply it wrote at the splice.
	__u32 ack_max;
	// With `learn` 1: the outgoing leg's TSval offset from CLOCK_MONOTONIC ms.
	__u32 ts_off;
	__u32 learn;
	// The slot of `clamps` that caps the windows this direction carries (0: none).
	__u32 pace;
	// Data bytes forwarded while ACTIVE (new bytes only, retransmissions not counted).
	__u64 bytes;
	// Time of the last packet (bpf_ktime_get_ns), for idle expiry.
	__u64 last_ns;
	// Packets dropped while FROZEN; packets that could not be sent on.
	__u64 dropped;
	__u64 unroutable;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct key);
	__type(value, struct flow);
} flows SEC(".maps");

// Window clamps in bytes, by slot (slot 0 unused: `pace` 0 is no slot).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} clamps SEC(".maps");

struct opts {
	__u8 old[64];
	__u32 len; /* options length, a multiple of 4, at most 40 */
	__u32 i;   /* parse cursor */
	__s32 ts;  /* offset of the timestamps option, or -1 */
	__s32 sack;
	__u32 sack_n;
};

// One step over the options (a plain loop exceeds the verifier's limits: docs/kernel-notes.md).
static long parse_opt(__u32 idx, void *ctx)
{
	struct opts *o = ctx;
	__u32 i = o->i;
	if (i >= o->len || i >= 40)
		return 1;
	__u8 kind = o->old[i & 63];
	if (kind == 0)
		return 1;
	if (kind == 1) {
		o->i = i + 1;
		return 0;
	}
	if (i + 1 >= o->len)
		return 1;
	__u8 l = o->old[(i + 1) & 63];
	if (l < 2 || i + l > o->len)
		return 1;
	if (kind == 8 && l == 10)
		o->ts = i;
	if (kind == 5 && l >= 10 && ((l - 2) & 7) == 0) {
		o->sack = i;
		o->sack_n = (l - 2) / 8;
	}
	o->i = i + l;
	return 0;
}

// Byte-wise access at variable offsets (docs/kernel-notes.md: the verifier wants it so).
static __always_inline __u32 get32(const __u8 *b, __u32 off)
{
	return ((__u32)b[off & 63] << 24) | ((__u32)b[(off + 1) & 63] << 16) |
	       ((__u32)b[(off + 2) & 63] << 8) | (__u32)b[(off + 3) & 63];
}

static __always_inline void put32(__u8 *b, __u32 off, __u32 v)
{
	b[off & 63] = v >> 24;
	b[(off + 1) & 63] = v >> 16;
	b[(off + 2) & 63] = v >> 8;
	b[(off + 3) & 63] = v;
}

static __always_inline int after(__u32 a, __u32 b)
{
	return (__s32)(a - b) > 0;
}

// Advances seq_max to `end` and counts the bytes it passes over. A direction's packets
// may be processed on several CPUs at once: whoever moves seq_max counts what it moved
// (compare-and-swap), so no range is counted twice or lost. Bounded retries for the
// verifier: a range left after losing all of them is counted by the next packet beyond it.
// The entry of the other direction of `f`'s pair: keyed by the packets that come back,
// from where `f` sends to, to where it sends from.
static __always_inline struct flow *reverse(const struct flow *f)
{
	struct key back = {
		.saddr = f->daddr,
		.daddr = f->saddr,
		.sport = f->dport,
		.dport = f->sport,
	};
	return bpf_map_lookup_elem(&flows, &back);
}

static __always_inline void count_new_bytes(struct flow *f, __u32 end)
{
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u32 old = f->seq_max;
		if (!after(end, old))
			return;
		if (__sync_val_compare_and_swap(&f->seq_max, old, end) == old) {
			__sync_fetch_and_add(&f->bytes, (__u64)(end - old));
			return;
		}
	}
}

SEC("classifier")
int ipsplice_ingress(struct __sk_buff *skb)
{
	struct ethhdr eth;
	struct iphdr ip;
	struct tcphdr tcp;

	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)))
		return TC_ACT_OK;
	if (eth.h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)))
		return TC_ACT_OK;
	if (ip.protocol != IPPROTO_TCP || ip.ihl < 5 || (ip.frag_off & bpf_htons(0x3fff)))
		return TC_ACT_OK;
	__u32 l4 = ETH_HLEN + ip.ihl * 4;
	if (bpf_skb_load_bytes(skb, l4, &tcp, sizeof(tcp)))
		return TC_ACT_OK;
	struct key k = {
		.saddr = ip.saddr,
		.daddr = ip.daddr,
		.sport = tcp.source,
		.dport = tcp.dest,
	};
	struct flow *f = bpf_map_lookup_elem(&flows, &k);
	if (!f)
		return TC_ACT_OK;

	if (tcp.syn && !tcp.ack && f->mode == MODE_ACTIVE) {
		// A connection attempt on a spliced pair's addresses and ports: the endpoint's
		// old socket is gone (an ended tunnel's entries linger a moment for its last ACKs
		// and FINs, and a client may reuse its port at once). It is a new connection, not
		// the spliced one: rewritten, it would be joined to the old upstream connection's
		// server. Both entries stop rewriting (observe mode: packets go to the host's
		// stack, so the SYN reaches the proxy's listener), and this one records a reset,
		// so the proxy ends the tunnel (if it had not) with its counts as they were.
		struct flow *b = reverse(f);
		if (b)
			b->mode = MODE_OBSERVE;
		f->mode = MODE_OBSERVE;
		f->flags |= F_RST;
		return TC_ACT_OK;
	}

	__u32 doff = tcp.doff * 4;
	if (doff < 20 || doff > 60 || skb->len < l4 + doff)
		return TC_ACT_OK;
	__u32 payload = skb->len - l4 - doff;
	__u32 seq = bpf_ntohl(tcp.seq);
	__u32 end = seq + payload;
	f->last_ns = bpf_ktime_get_ns();

	struct opts o = {};
	o.ts = -1;
	o.sack = -1;
	o.len = doff - 20;
	if (o.len > 40)
		return TC_ACT_OK;
	if (o.len > 0) {
		if (bpf_skb_load_bytes(skb, l4 + 20, o.old, o.len))
			return TC_ACT_OK;
		bpf_loop(40, parse_opt, &o, 0);
	}
	__u32 tsval = 0, tsecr = 0;
	if (o.ts >= 0) {
		tsval = get32(o.old, o.ts + 2);
		tsecr = get32(o.old, o.ts + 6);
		f->last_tsval = tsval;
		f->seen |= SEEN_TSVAL;
	}

	if (f->mode != MODE_ACTIVE) {
		int fresh = payload && (!(f->seen & SEEN_SEQ) || after(end, f->seq_max));
		if (f->mode == MODE_FREEZE && !tcp.rst && (fresh || tcp.fin || tcp.syn)) {
			// New data would land in a socket being snapshotted: the endpoint resends it.
			// Its end is not recorded: a resent copy must be dropped too while frozen,
			// or its bytes would reach the socket behind the snapshot's back.
			f->dropped++;
			return TC_ACT_SHOT;
		}
		if (fresh) {
			f->seq_max = end;
			f->seen |= SEEN_SEQ;
		}
		return TC_ACT_OK;
	}

	if (o.ts >= 0 && f->learn && __sync_val_compare_and_swap(&f->learn, 1, 0) == 1) {
		// One millisecond ahead, so that no mapped TSval is older than one the proxy's
		// socket sent on that leg (the receiver would drop it: PAWS).
		__u32 now_ms = bpf_ktime_get_ns() / 1000000;
		__u32 delta = now_ms + f->ts_off + 1 - tsval;
		f->tsval_delta = delta;
		struct flow *b = reverse(f);
		if (b)
			b->tsecr_delta = -delta;
	}
	if (tcp.ack) {
		__u32 ack = bpf_ntohl(tcp.ack_seq);
		if (!(f->seen & SEEN_ACK) || after(ack, f->ack_max)) {
			f->ack_max = ack;
			f->seen |= SEEN_ACK;
		}
	}
	if (tcp.rst)
		f->flags |= F_RST;
	if (tcp.fin)
		f->flags |= F_FIN;
	if (payload)
		count_new_bytes(f, end);

	// The fixed TCP header.
	struct tcphdr n = tcp;
	n.source = f->sport;
	n.dest = f->dport;
	n.seq = bpf_htonl(seq + f->seq_delta);
	if (tcp.ack)
		n.ack_seq = bpf_htonl(bpf_ntohl(tcp.ack_seq) + f->ack_delta);
	if (!tcp.syn) {
		__u32 w = (__u32)bpf_ntohs(tcp.window) << (f->wscale_in & 15);
		__u32 slot = f->pace;
		if (slot) {
			__u32 *c = bpf_map_lookup_elem(&clamps, &slot);
			// Rounded up to the outgoing scale's unit, so a clamp of two segments
			// still lets two through.
			if (c && *c && w > *c)
				w = *c + ((1u << (f->wscale_out & 15)) - 1);
		}
		w >>= f->wscale_out & 15;
		n.window = bpf_htons(w > 65535 ? 65535 : w);
	}
	__s64 d = bpf_csum_diff((__be32 *)&tcp, 20, (__be32 *)&n, 20, 0);
	if (d < 0 || bpf_skb_store_bytes(skb, l4, &n, 20, 0) ||
	    bpf_l4_csum_replace(skb, l4 + offsetof(struct tcphdr, check), 0, d, 0))
		return TC_ACT_SHOT;

	// Options: timestamps and SACK edges.
	if (o.ts >= 0 || o.sack >= 0) {
		__u8 nb[64];
		__builtin_memcpy(nb, o.old, 64);
		if (o.ts >= 0) {
			put32(nb, o.ts + 2, tsval + f->tsval_delta);
			if (tsecr)
				put32(nb, o.ts + 6, tsecr + f->tsecr_delta);
		}
		if (o.sack >= 0) {
			for (__u32 b = 0; b < 4; b++) {
				if (b >= o.sack_n)
					break;
				__u32 at = o.sack + 2 + b * 8;
				put32(nb, at, get32(o.old, at) + f->ack_delta);
				put32(nb, at + 4, get32(o.old, at + 4) + f->ack_delta);
			}
		}
		__u32 len = o.len;
		if (len < 4 || len > 40)
			return TC_ACT_SHOT;
		d = bpf_csum_diff((__be32 *)o.old, len, (__be32 *)nb, len, 0);
		if (d < 0 || bpf_skb_store_bytes(skb, l4 + 20, nb, len, 0) ||
		    bpf_l4_csum_replace(skb, l4 + offsetof(struct tcphdr, check), 0, d, 0))
			return TC_ACT_SHOT;
	}

	// Addresses: the IP checksum, and the TCP checksum's pseudo-header. Last, because the
	// header stores above write the checksum field as it was loaded.
	__u32 old_addr[2] = {ip.saddr, ip.daddr};
	__u32 new_addr[2] = {f->saddr, f->daddr};
	d = bpf_csum_diff(old_addr, 8, new_addr, 8, 0);
	if (d < 0)
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, saddr), new_addr, 8, 0) ||
	    bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), 0, d, 0) ||
	    bpf_l4_csum_replace(skb, l4 + offsetof(struct tcphdr, check), 0, d, BPF_F_PSEUDO_HDR))
		return TC_ACT_SHOT;

	// Out of the interface toward the other end, with that hop's MACs.
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET;
	fib.l4_protocol = IPPROTO_TCP;
	fib.sport = f->sport;
	fib.dport = f->dport;
	fib.ipv4_src = f->saddr;
	fib.ipv4_dst = f->daddr;
	fib.ifindex = f->oif;
	long r = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_OUTPUT);
	if (r == BPF_FIB_LKUP_RET_SUCCESS) {
		__u8 macs[12];
		__builtin_memcpy(macs, fib.dmac, 6);
		__builtin_memcpy(macs + 6, fib.smac, 6);
		if (bpf_skb_store_bytes(skb, 0, macs, 12, 0))
			return TC_ACT_SHOT;
		return bpf_redirect(fib.ifindex, 0);
	}
	// No neighbour entry yet, or a host that does not forward (the FIB helper refuses
	// lookups then, even output ones): the neighbour subsystem routes and resolves.
	if (r == BPF_FIB_LKUP_RET_NO_NEIGH || r == BPF_FIB_LKUP_RET_FWD_DISABLED)
		return bpf_redirect_neigh(f->oif, NULL, 0, 0);
	f->unroutable++;
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
