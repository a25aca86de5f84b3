// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
// The lab's count of received TCP segments by the state of the socket that takes them
// (seed 002: its booster took most of its packets in FIN_WAIT_1, after it had closed a
// connection whose response was still draining to a slow client). A TC ingress program:
// each IPv4 TCP segment arriving on an interface is looked up, as the stack is about to,
// in the network namespace's socket tables (established, time-wait, request and listening
// sockets), and counted per interface and state (0: no socket).
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct state_key {
	__u32 ifindex;
	__u32 state; /* the kernel's TCP state: 1 ESTABLISHED ... 12 NEW_SYN_RECV; 0 none */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct state_key);
	__type(value, __u64);
} counts SEC(".maps");

SEC("classifier")
int tcpstate_ingress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct tcphdr *tcp;
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;
	struct state_key k = {};
	__u64 one = 1, *n;
	__u32 ihl;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_TCP)
		return TC_ACT_OK;
	ihl = (ip->ihl & 0xf) * 4;
	if (ihl < sizeof(*ip))
		return TC_ACT_OK;
	tcp = (void *)ip + ihl;
	if ((void *)(tcp + 1) > end)
		return TC_ACT_OK;
	t.ipv4.saddr = ip->saddr;
	t.ipv4.daddr = ip->daddr;
	t.ipv4.sport = tcp->source;
	t.ipv4.dport = tcp->dest;
	k.ifindex = skb->ifindex;
	sk = bpf_skc_lookup_tcp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	if (sk) {
		k.state = sk->state;
		bpf_sk_release(sk);
	}
	n = bpf_map_lookup_elem(&counts, &k);
	if (n)
		*n += 1; /* per CPU: no other writer */
	else
		bpf_map_update_elem(&counts, &k, &one, BPF_NOEXIST);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
