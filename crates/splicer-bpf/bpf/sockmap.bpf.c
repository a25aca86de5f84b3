// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
// The sockmap engine's verdict program (socket-level splice, seed 000): every skb that
// arrives on a spliced socket is redirected, inside the kernel, to the send side of its
// peer. The proxy inserts both sockets of a tunnel in `socks` and records each one's peer
// in `peers` (socket cookie -> key of the peer in `socks`).
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
} peers SEC(".maps");

// Sockets whose skbs could not be redirected (their peer not yet, or no longer, in
// `socks`): cookie -> skbs kept for the proxy. While a pair is set up, a non-zero count
// means bytes may be out of order, and the proxy resets the pair rather than deliver them.
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

// A parser that takes every skb whole, so the verdict runs through the kernel's stream
// parser. Without it, under packet loss on Linux 6.18, redirected streams were duplicated
// or corrupted; with it no wrong byte was seen, though streams can still stall under loss
// (docs/engines.md), which is why the engine is opt-in.
SEC("sk_skb/stream_parser")
int splice_parser(struct __sk_buff *skb)
{
	return skb->len;
}

SEC("sk_skb/stream_verdict")
int splice_verdict(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	__u64 *peer = bpf_map_lookup_elem(&peers, &cookie);

	if (!peer)
		return keep(cookie);
	// Flags 0: onto the peer's send queue (egress), as a relay would write it. A failed
	// redirect would drop the skb (SK_DROP): keep it for the proxy instead.
	if (bpf_sk_redirect_hash(skb, &socks, peer, 0) != SK_PASS)
		return keep(cookie);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
