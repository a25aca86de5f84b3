// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
// Per-leg TCP tuning (seed 004): a cgroup sockops program that, as each TCP connection of a
// configured leg is established, sets its initial congestion window (TCP_BPF_IW), congestion
// control, minimum RTO and delayed-ACK bound. Legs are told apart by address, within one
// network namespace: an accepted connection by its local address and port (a listener; the
// unspecified address stands for every local one), a connection the proxy opened by its
// remote address and port (an upstream server). The proxy fills `legs`; what the kernel
// refused is counted in `refused` per setting, with the last error, for the proxy to log.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define SOL_TCP 6
#define TCP_CONGESTION 13
#define AF_INET 2
#define AF_INET6 10
#define CA_NAME_MAX 16

struct leg_key {
	__u64 netns;
	__u32 addr[4]; /* network order; IPv4 in addr[0], the rest zero */
	__u16 port;    /* host order */
	__u8 family;   /* 4 or 6 */
	__u8 side;     /* 0: accepted (local address), 1: opened (remote address) */
	__u32 pad;
};

struct tuning {
	__u32 initial_window; /* segments; 0: left alone */
	__u32 rto_min_us;     /* 0: left alone */
	__u32 delack_max_us;  /* 0: left alone */
	__u32 pad;
	char congestion[CA_NAME_MAX]; /* "": left alone */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct leg_key);
	__type(value, struct tuning);
} legs SEC(".maps");

/* Per setting (0 tuned connections, 1 window, 2 congestion, 3 RTO, 4 delayed ACK):
 * [2k] how many times, [2k + 1] the last error (a negative errno). */
#define SETTINGS 5
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * SETTINGS);
	__type(key, __u32);
	__type(value, __s64);
} outcomes SEC(".maps");

static void count(__u32 setting, long err)
{
	__u32 k = 2 * setting;
	__s64 *n = bpf_map_lookup_elem(&outcomes, &k);

	if (n)
		__sync_fetch_and_add(n, 1);
	if (setting > 0) {
		k++;
		n = bpf_map_lookup_elem(&outcomes, &k);
		if (n)
			*n = err;
	}
}

static void set_int(struct bpf_sock_ops *skops, __u32 setting, int opt, __u32 value)
{
	int v = value;
	long err;

	if (!value)
		return;
	err = bpf_setsockopt(skops, SOL_TCP, opt, &v, sizeof(v));
	if (err)
		count(setting, err);
}

static struct tuning *find(struct bpf_sock_ops *skops, __u8 side)
{
	struct leg_key key = {};
	struct tuning *t;

	key.netns = bpf_get_netns_cookie(skops);
	key.side = side;
	/* Both ends are read and then chosen between: a conditional read of the context would
	 * be compiled into an offset context pointer, which the verifier refuses. */
	if (skops->family == AF_INET) {
		__u32 remote = skops->remote_ip4, local = skops->local_ip4;

		key.family = 4;
		key.addr[0] = side ? remote : local;
	} else if (skops->family == AF_INET6) {
		__u32 r0 = skops->remote_ip6[0], r1 = skops->remote_ip6[1];
		__u32 r2 = skops->remote_ip6[2], r3 = skops->remote_ip6[3];
		__u32 l0 = skops->local_ip6[0], l1 = skops->local_ip6[1];
		__u32 l2 = skops->local_ip6[2], l3 = skops->local_ip6[3];

		key.family = 6;
		key.addr[0] = side ? r0 : l0;
		key.addr[1] = side ? r1 : l1;
		key.addr[2] = side ? r2 : l2;
		key.addr[3] = side ? r3 : l3;
	} else {
		return 0;
	}
	/* local_port is in host order, remote_port in network order (in the high half). */
	{
		__u32 remote = bpf_ntohl(skops->remote_port), local = skops->local_port;

		key.port = side ? remote : local;
	}
	t = bpf_map_lookup_elem(&legs, &key);
	if (t || side)
		return t;
	/* A listener on the unspecified address. */
	key.addr[0] = key.addr[1] = key.addr[2] = key.addr[3] = 0;
	return bpf_map_lookup_elem(&legs, &key);
}

SEC("sockops")
int splicer_tune(struct bpf_sock_ops *skops)
{
	struct tuning *t;
	__u8 side;

	switch (skops->op) {
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		side = 0;
		break;
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		side = 1;
		break;
	default:
		return 1;
	}
	t = find(skops, side);
	if (!t)
		return 1;
	/* The initial window only holds when set here, before any data was sent. */
	set_int(skops, 1, TCP_BPF_IW, t->initial_window);
	if (t->congestion[0]) {
		char name[CA_NAME_MAX];
		long err;

		__builtin_memcpy(name, t->congestion, CA_NAME_MAX);
		name[CA_NAME_MAX - 1] = 0;
		err = bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, name, sizeof(name));
		if (err)
			count(2, err);
	}
	set_int(skops, 3, TCP_BPF_RTO_MIN, t->rto_min_us);
	set_int(skops, 4, TCP_BPF_DELACK_MAX, t->delack_max_us);
	count(0, 0);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
