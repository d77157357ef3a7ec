// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * otcp_sockops: the agent's enforcement of OTCP's per-destination window,
 * initial window, minimum RTO and pacing rate from the first segment of the
 * first connection (route metrics reach TCP's window clamp only through the
 * tcp_metrics cache: docs/design.md, "Kernel facts"; docs/enforcement.md).
 *
 * One instance serves every OTCP host of a machine: it is attached to the
 * cgroup-v2 root, where every socket of every namespace is seen (Mininet's
 * hosts share that cgroup). It acts only on a socket whose (network
 * namespace cookie, remote address) has an entry, and never on a connection
 * to the host's own address (a set's prefix may cover it):
 *
 *   otcp_so_slot:   netns cookie -> the slot (0 or 1) of that host's live set;
 *                   a host without an entry is not OTCP's and is left alone;
 *   otcp_so_params: LPM trie on (netns cookie, slot, remote address), the
 *                   address as IPv6 (IPv4 as ::ffff:a.b.c.d, so a dual-stack
 *                   socket's v4-mapped peer matches the same entry), the
 *                   prefix length counting the cookie's 64 bits and the
 *                   slot's 32 first.
 *
 * The loader (otcp_bpf/sockops.py) writes a host's new set into the slot
 * that is not live and then flips the host's slot with one map write, so a
 * connection sees either the whole old set or the whole new one.
 *
 * At BPF_SOCK_OPS_{ACTIVE,PASSIVE}_ESTABLISHED_CB, the callback the kernel
 * makes in tcp_init_transfer() right after it set the initial window from
 * the route and before any data segment leaves, the program sets, for each
 * non-zero field of the entry:
 *   - TCP_BPF_SNDCWND_CLAMP (snd_cwnd_clamp, and ssthresh to the same);
 *   - TCP_BPF_IW (snd_cwnd; the kernel accepts it until data was sent);
 *   - TCP_BPF_RTO_MIN (icsk_rto_min; the kernel accepts 2 jiffies..200 ms;
 *     a locked route rto_min still takes precedence in tcp_rto_min());
 *   - SO_MAX_PACING_RATE (bytes/s; TCP then paces internally, no fq needed).
 * Outcomes are counted in otcp_so_cnt (per CPU); each entry counts the
 * connections it was applied to.
 *
 * A matched connection also asks for BPF_SOCK_OPS_RTT_CB (one callback per
 * ACK that gives a round-trip sample, under the socket lock, where
 * bpf_setsockopt is allowed) and remembers in otcp_so_sk (socket storage)
 * the pacing rate and window clamp it was given. At each RTT callback the
 * program looks the connection's entry up again; when the live set's rate
 * or clamp differs from the one remembered (the controller's flow counts
 * moved, and a new set was switched in), it sets it again: the new rate,
 * or no maximum (~0) when the entry is gone or has none; the new clamp
 * (the kernel then holds cwnd to it from the next ACK: tcp_slow_start and
 * tcp_cong_avoid_ai cap cwnd at snd_cwnd_clamp), or none left as it was.
 * So established connections follow the set within one round trip of its
 * switch. The initial window and rto_min stay those of the connection's
 * start (docs/enforcement.md, "Limits").
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char _license[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2
#define AF_INET6 10
#define SOL_SOCKET 1
#define SOL_TCP 6
#define SO_MAX_PACING_RATE 47

struct otcp_so_key {
	__u32 prefixlen;        /* bits of what follows that must match */
	__u64 netns;            /* bpf_get_netns_cookie() of the host */
	__u32 slot;             /* 0 or 1: which of the host's two sets */
	__u8 addr[16];          /* remote address, IPv6 or ::ffff:IPv4 */
} __attribute__((packed));

struct otcp_so_params {
	__u32 cwnd_clamp;       /* segments; 0: leave alone */
	__u32 initcwnd;         /* segments; 0: leave alone */
	__u32 rto_min_us;       /* 0: leave alone */
	__u32 pad;
	__u64 pacing_rate;      /* bytes/s (below 2^32); 0: leave alone */
	__u64 applied;          /* connections this entry was applied to */
};

/* Counters, in the order otcp_bpf/sockops.py's COUNTERS names them. */
struct otcp_so_counters {
	__u64 established;      /* established callbacks seen (every socket of the machine) */
	__u64 not_otcp;         /* ... of a namespace without an OTCP set */
	__u64 no_entry;         /* ... of an OTCP host, to a destination without an entry */
	__u64 own_address;      /* ... of an OTCP host to one of its own addresses (never crosses the fabric) */
	__u64 matched;          /* ... that found an entry */
	__u64 clamp_set;
	__u64 clamp_refused;
	__u64 iw_set;
	__u64 iw_refused;
	__u64 rto_set;
	__u64 rto_refused;
	__u64 pacing_set;
	__u64 pacing_refused;
	__u64 pacing_updated;   /* an established connection's rate set again (RTT callback) */
	__u64 pacing_update_refused;
	__u64 clamp_updated;    /* an established connection's window clamp set again (RTT callback) */
	__u64 clamp_update_refused;
};

/* What the program set on one connection, kept with the socket. */
struct otcp_so_sk {
	__u64 pacing_rate;      /* bytes/s last set; 0: none set */
	__u32 cwnd_clamp;       /* segments last set; 0: none set */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} otcp_so_slot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct otcp_so_key);
	__type(value, struct otcp_so_params);
} otcp_so_params SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct otcp_so_counters);
} otcp_so_cnt SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct otcp_so_sk);
} otcp_so_sk SEC(".maps");

#define COUNT(field) do { if (c) c->field++; } while (0)
#define OUTCOME(err, set, refused) do { if (err) COUNT(refused); else COUNT(set); } while (0)

/* The live entry for the connection's (namespace, remote address), or NULL;
 * c (may be NULL) counts why not. */
static __always_inline struct otcp_so_params *entry_of(struct bpf_sock_ops *skops, struct otcp_so_counters *c)
{
	struct otcp_so_params *p;
	struct otcp_so_key key = {};
	__u32 *slot;
	__u64 netns;

	netns = bpf_get_netns_cookie(skops);
	slot = bpf_map_lookup_elem(&otcp_so_slot, &netns);
	if (!slot) {
		COUNT(not_otcp);
		return NULL;
	}
	key.netns = netns;
	key.slot = *slot;
	if (skops->family == AF_INET) {
		__u32 remote = skops->remote_ip4, local = skops->local_ip4;

		if (local == remote) {
			COUNT(own_address);
			return NULL;
		}
		key.prefixlen = 64 + 32 + 128;
		key.addr[10] = 0xff;
		key.addr[11] = 0xff;
		__builtin_memcpy(&key.addr[12], &remote, 4);
	} else if (skops->family == AF_INET6) {
		/* One load per context field: the verifier refuses a context
		 * pointer the compiler has offset. */
		__u32 r0 = skops->remote_ip6[0], r1 = skops->remote_ip6[1];
		__u32 r2 = skops->remote_ip6[2], r3 = skops->remote_ip6[3];
		__u32 l0 = skops->local_ip6[0], l1 = skops->local_ip6[1];
		__u32 l2 = skops->local_ip6[2], l3 = skops->local_ip6[3];

		if (l0 == r0 && l1 == r1 && l2 == r2 && l3 == r3) {
			COUNT(own_address);
			return NULL;
		}
		key.prefixlen = 64 + 32 + 128;
		__builtin_memcpy(&key.addr[0], &r0, 4);
		__builtin_memcpy(&key.addr[4], &r1, 4);
		__builtin_memcpy(&key.addr[8], &r2, 4);
		__builtin_memcpy(&key.addr[12], &r3, 4);
	} else {
		COUNT(no_entry);
		return NULL;
	}
	p = bpf_map_lookup_elem(&otcp_so_params, &key);
	if (!p)
		COUNT(no_entry);
	return p;
}

/* An established connection at an RTT callback: its pacing rate and window clamp follow the live set. */
static __always_inline void follow_set(struct bpf_sock_ops *skops)
{
	struct otcp_so_counters *c;
	struct otcp_so_params *p;
	struct otcp_so_sk *mine;
	struct bpf_sock *sk;
	__u32 zero = 0, clamp;
	__u64 rate;
	int val, err;

	sk = skops->sk;
	if (!sk)
		return;
	mine = bpf_sk_storage_get(&otcp_so_sk, sk, 0, 0);
	if (!mine)
		return;
	p = entry_of(skops, NULL);
	rate = p ? p->pacing_rate : 0;
	clamp = p ? p->cwnd_clamp : 0;
	c = bpf_map_lookup_elem(&otcp_so_cnt, &zero);
	if (rate != mine->pacing_rate) {
		/* 0 in the entry: no maximum (the kernel reads ~0U as unlimited). */
		val = rate ? (int)(__u32)rate : -1;
		err = bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &val, sizeof(val));
		OUTCOME(err, pacing_updated, pacing_update_refused);
		if (!err)
			mine->pacing_rate = rate;
	}
	/* A clamp is never lifted here: 0 (no entry, or none) leaves the last one. */
	if (clamp && clamp != mine->cwnd_clamp) {
		val = clamp;
		err = bpf_setsockopt(skops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, &val, sizeof(val));
		OUTCOME(err, clamp_updated, clamp_update_refused);
		if (!err)
			mine->cwnd_clamp = clamp;
	}
}

SEC("sockops")
int otcp_sockops(struct bpf_sock_ops *skops)
{
	struct otcp_so_counters *c;
	struct otcp_so_params *p;
	struct otcp_so_sk *mine;
	struct bpf_sock *sk;
	__u32 zero = 0;
	int val, err;

	if (skops->op == BPF_SOCK_OPS_RTT_CB) {
		follow_set(skops);
		return 1;
	}
	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	c = bpf_map_lookup_elem(&otcp_so_cnt, &zero);
	COUNT(established);
	p = entry_of(skops, c);
	if (!p)
		return 1;
	COUNT(matched);
	__sync_fetch_and_add(&p->applied, 1);

	__u32 clamp_set_to = 0;

	if (p->cwnd_clamp) {
		val = p->cwnd_clamp;
		err = bpf_setsockopt(skops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, &val, sizeof(val));
		OUTCOME(err, clamp_set, clamp_refused);
		if (!err)
			clamp_set_to = p->cwnd_clamp;
	}
	if (p->initcwnd) {
		val = p->initcwnd;
		err = bpf_setsockopt(skops, SOL_TCP, TCP_BPF_IW, &val, sizeof(val));
		OUTCOME(err, iw_set, iw_refused);
	}
	if (p->rto_min_us) {
		val = p->rto_min_us;
		err = bpf_setsockopt(skops, SOL_TCP, TCP_BPF_RTO_MIN, &val, sizeof(val));
		OUTCOME(err, rto_set, rto_refused);
	}
	if (p->pacing_rate) {
		val = (int)(__u32)p->pacing_rate;
		err = bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &val, sizeof(val));
		OUTCOME(err, pacing_set, pacing_refused);
	} else {
		err = 0;
	}
	/* Remember the rate and clamp, and ask for RTT callbacks so that they follow later sets. */
	sk = skops->sk;
	if (sk) {
		mine = bpf_sk_storage_get(&otcp_so_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (mine) {
			mine->pacing_rate = err ? 0 : p->pacing_rate;
			mine->cwnd_clamp = clamp_set_to;
			bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTT_CB_FLAG);
		}
	}
	return 1;
}
