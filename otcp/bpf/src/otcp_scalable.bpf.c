// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * otcp_scalable: Scalable TCP (T. Kelly) with GridDT's per-connection
 * additive increase (S. Ravot), as a BPF struct_ops congestion control for
 * long fat paths. This kernel has no tcp_scalable module; a name of its own
 * is never confused with the kernel's. The rules are in otcp_scalable.h:
 * above lwnd = 16 segments, cwnd += 0.01 per segment acknowledged and
 * cwnd -= cwnd / 8 per window with a loss; at or below it, A segments per
 * round trip and halving (A = 1 is Reno). With OTCP_SC_GRIDDT in the
 * destination's entry, the AIMD rule with A holds at every window.
 *
 * Per destination: otcp_sc_dst, an LPM trie on (network namespace cookie,
 * remote address; IPv4 as ::ffff:a.b.c.d), the prefix length counting the
 * cookie's 64 bits first, as the sock_ops program's otcp_so_params (Mininet's
 * hosts share one kernel: a host's entries are its namespace's). A
 * connection looks its entry up once, when the algorithm is initialised
 * (connection established, or the algorithm chosen later):
 *   increase_x256    A, x256 (0: one segment per round trip);
 *   initial_ssthresh segments; set when the kernel holds no threshold yet
 *                    (still infinite: no loss, no route ssthresh);
 *   flags            OTCP_SC_GRIDDT;
 *   applied          connections that took the entry (counted here).
 * The loader (otcp/bpf/scalable.py) pins both maps under
 * /sys/fs/bpf/otcp/scalable/ and fills and clears entries.
 *
 * The window is set in cong_control, on every ACK, as otcp_dctcp does, and
 * for the same reason (docs/bpf.md, "DCTCP"): on this kernel a
 * value-returning struct_ops hook (ssthresh, undo_cwnd) now and then hands
 * the kernel a garbage value without our program having run. So ssthresh()
 * records the cut, cong_control holds the kernel's threshold and window to
 * it, makes the cut itself when ssthresh() was skipped, and puts back a
 * threshold or window out of any possible range. With cong_control the
 * kernel runs no proportional rate reduction: in CWR and Recovery the window
 * is the new threshold at once (the cut is 1/8 above lwnd). Outcomes and
 * repairs are counted in otcp_sc_cnt (per CPU).
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "otcp_cc.h"
#include "otcp_scalable.h"

char _license[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2
#define AF_INET6 10

struct otcp_sc_key {
	__u32 prefixlen;        /* bits of what follows that must match */
	__u64 netns;            /* network namespace cookie of the host */
	__u8 addr[16];          /* remote address, IPv6 or ::ffff:IPv4 */
} __attribute__((packed));

struct otcp_sc_params {
	__u32 increase_x256;    /* GridDT's A x256; 0: one segment per round trip */
	__u32 initial_ssthresh; /* segments; 0: leave the kernel's */
	__u32 flags;            /* OTCP_SC_GRIDDT */
	__u32 pad;
	__u64 applied;          /* connections that took this entry */
};

/* Counters, in the order otcp/bpf/scalable.py's COUNTERS names them. */
struct otcp_sc_counters {
	__u64 connections;        /* algorithm initialised on a connection */
	__u64 matched;            /* ... whose destination had an entry */
	__u64 ssthresh_from_map;  /* ... that took the entry's initial ssthresh */
	__u64 acks;               /* ACKs that acknowledged new data outside CWR/Recovery */
	__u64 not_cwnd_limited;   /* ... on which cwnd did not limit sending: no growth */
	__u64 slow_start_acked;   /* segments acknowledged in slow start */
	__u64 additive_acked;     /* segments acknowledged in congestion avoidance under the AIMD rule */
	__u64 additive_increase;  /* segments cwnd grew by under it */
	__u64 additive_rounds_x1024; /* round trips' worth of those ACKs (acked / cwnd) x 1024 */
	__u64 scalable_acked;     /* segments acknowledged in congestion avoidance above lwnd */
	__u64 scalable_increase;  /* segments cwnd grew by above lwnd */
	__u64 scalable_cuts;      /* reductions by b (cwnd above lwnd) */
	__u64 halvings;           /* reductions by half (at or below lwnd, or GridDT) */
	__u64 cuts_without_hook;  /* reductions cong_control made because ssthresh() did not run */
	__u64 ssthresh_repaired;  /* kernel thresholds out of range, put back */
	__u64 cwnd_repaired;      /* kernel windows out of range, put back */
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct otcp_sc_key);
	__type(value, struct otcp_sc_params);
} otcp_sc_dst SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct otcp_sc_counters);
} otcp_sc_cnt SEC(".maps");

static __always_inline struct otcp_sc_counters *counters(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&otcp_sc_cnt, &zero);
}

#define COUNT(c, field) do { if (c) (c)->field++; } while (0)
#define ADD(c, field, n) do { if (c) (c)->field += (n); } while (0)

/* Per-connection state, kept in icsk_ca_priv (104 bytes available). */
struct otcp_sc {
	__u64 frac;             /* growth not yet a whole segment, 2^-32 segments */
	__u32 increase_x256;    /* A for this connection */
	__u32 flags;            /* its entry's flags */
	__u32 ssthresh;         /* our threshold, the one the kernel should hold */
	__u32 loss_cwnd;        /* cwnd before the last reduction, for undo */
	__u32 good_cwnd;        /* cwnd after the last ACK, known sane */
	__u32 in_reduction;     /* the current CWR/Recovery/Loss episode has been cut */
};

static __always_inline struct otcp_sc *ca_of(struct sock *sk)
{
	return (struct otcp_sc *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct tcp_sock *tcp_of(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct otcp_sc_params *entry_of(struct sock *sk)
{
	struct otcp_sc_key key = {};
	__u16 family = sk->__sk_common.skc_family;
	__u32 v4;

	key.netns = sk->__sk_common.skc_net.net->net_cookie;
	if (family == AF_INET) {
		v4 = sk->__sk_common.skc_daddr;
		key.addr[10] = 0xff;
		key.addr[11] = 0xff;
		__builtin_memcpy(&key.addr[12], &v4, 4);
	} else if (family == AF_INET6) {
		/* A dual-stack socket's IPv4 peer is ::ffff:a.b.c.d here already. */
		__builtin_memcpy(key.addr, sk->__sk_common.skc_v6_daddr.in6_u.u6_addr8, 16);
	} else {
		return NULL;
	}
	key.prefixlen = 64 + 128;
	return bpf_map_lookup_elem(&otcp_sc_dst, &key);
}

SEC("struct_ops/otcp_scalable_init")
void BPF_PROG(otcp_scalable_init, struct sock *sk)
{
	struct otcp_sc_counters *c = counters();
	struct tcp_sock *tp = tcp_of(sk);
	struct otcp_sc *ca = ca_of(sk);
	struct otcp_sc_params *p;
	__u32 ssthresh;

	ca->frac = 0;
	ca->increase_x256 = OTCP_SC_INCREASE_ONE;
	ca->flags = 0;
	ca->loss_cwnd = 0;
	ca->in_reduction = 0;
	ca->good_cwnd = tp->snd_cwnd;
	COUNT(c, connections);
	p = entry_of(sk);
	if (p) {
		COUNT(c, matched);
		__sync_fetch_and_add(&p->applied, 1);
		ca->increase_x256 = otcp_sc_increase_x256(p->increase_x256);
		ca->flags = p->flags;
		ssthresh = p->initial_ssthresh;
		if (ssthresh >= 2 && ssthresh < SANE_WINDOW && tp->snd_ssthresh == INFINITE_SSTHRESH) {
			tp->snd_ssthresh = ssthresh < tp->snd_cwnd_clamp ? ssthresh : tp->snd_cwnd_clamp;
			COUNT(c, ssthresh_from_map);
		}
	}
	ca->ssthresh = tp->snd_ssthresh;
}

/* The reduction for an episode that starts at `cwnd`. */
static __always_inline void cut(struct otcp_sc *ca, __u32 cwnd, struct otcp_sc_counters *c)
{
	ca->loss_cwnd = cwnd;
	ca->ssthresh = otcp_sc_reduced(cwnd, ca->flags);
	ca->in_reduction = 1;
	ca->frac = 0;
	if (otcp_sc_scalable_cut(cwnd, ca->flags))
		COUNT(c, scalable_cuts);
	else
		COUNT(c, halvings);
}

/* Called once when a loss (or a local congestion notice) starts an
 * episode: record the cut; cong_control applies it. */
SEC("struct_ops/otcp_scalable_ssthresh")
__u32 BPF_PROG(otcp_scalable_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct otcp_sc *ca = ca_of(sk);

	cut(ca, otcp_cc_sane_cwnd(tp, ca->good_cwnd), counters());
	return ca->ssthresh;
}

/* Whether cwnd limits sending (the kernel's tcp_is_cwnd_limited): an
 * application that sends less than the window gets no growth. */
static __always_inline int cwnd_limited(struct tcp_sock *tp)
{
	if (tp->snd_cwnd < tp->snd_ssthresh)
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited);
}

static __always_inline void grow(struct tcp_sock *tp, struct otcp_sc *ca, __u32 acked, struct otcp_sc_counters *c)
{
	struct otcp_sc_window w = {
		.frac = ca->frac,
		.cwnd = tp->snd_cwnd,
		.ssthresh = tp->snd_ssthresh,
		.clamp = tp->snd_cwnd_clamp,
	};
	struct otcp_sc_step step;

	otcp_sc_grow(&w, acked, ca->increase_x256, ca->flags, &step);
	tp->snd_cwnd = w.cwnd;
	ca->frac = w.frac;
	ADD(c, slow_start_acked, step.slow_start_acked);
	if (step.regime == OTCP_SC_ADDITIVE) {
		ADD(c, additive_acked, step.acked);
		ADD(c, additive_increase, step.increase);
		ADD(c, additive_rounds_x1024, step.rounds_x1024);
	} else if (step.regime == OTCP_SC_SCALABLE) {
		ADD(c, scalable_acked, step.acked);
		ADD(c, scalable_increase, step.increase);
	}
}

/* Every ACK: the window. In CWR and Recovery it is our threshold at once;
 * in Loss (after a timeout, the kernel set cwnd to what is in flight + 1)
 * slow start back to it; otherwise the growth rules. Values the kernel got
 * from a skipped hook are put back first. */
SEC("struct_ops/otcp_scalable_cong_control")
void BPF_PROG(otcp_scalable_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct otcp_sc_counters *c = counters();
	struct tcp_sock *tp = tcp_of(sk);
	struct otcp_sc *ca = ca_of(sk);
	__u8 state = icsk->icsk_ca_state;

	if (otcp_cc_repair_cwnd(tp, ca->good_cwnd))
		COUNT(c, cwnd_repaired);
	if (state >= TCP_CA_CWR) {
		if (!ca->in_reduction) {
			/* The kernel entered the episode but ssthresh() did not run. */
			cut(ca, otcp_cc_episode_cwnd(tp, ca->good_cwnd), c);
			COUNT(c, cuts_without_hook);
		}
		if (otcp_cc_hold_ssthresh(tp, ca->ssthresh))
			COUNT(c, ssthresh_repaired);
		if (state == TCP_CA_Loss) {
			if ((flag & FLAG_DATA_ACKED) && cwnd_limited(tp))
				grow(tp, ca, rs->acked_sacked, c);
		} else if (tp->snd_cwnd > ca->ssthresh) {
			tp->snd_cwnd = ca->ssthresh;
		}
	} else {
		ca->in_reduction = 0;
		if (otcp_cc_follow_ssthresh(tp, &ca->ssthresh))
			COUNT(c, ssthresh_repaired);
		/* Grow on in-order delivery only (RFC 5681), as the kernel does. */
		if (flag & FLAG_DATA_ACKED) {
			COUNT(c, acks);
			if (cwnd_limited(tp))
				grow(tp, ca, rs->acked_sacked, c);
			else
				COUNT(c, not_cwnd_limited);
		}
	}
	ca->good_cwnd = tp->snd_cwnd;
}

SEC("struct_ops/otcp_scalable_undo_cwnd")
__u32 BPF_PROG(otcp_scalable_undo_cwnd, struct sock *sk)
{
	struct otcp_sc *ca = ca_of(sk);

	ca->in_reduction = 0;
	return otcp_cc_undo_cwnd(tcp_of(sk), ca->good_cwnd, ca->loss_cwnd);
}

/* libbpf 1.1 registers maps from ".struct_ops" (it skips ".struct_ops.link"). */
SEC(".struct_ops")
struct tcp_congestion_ops otcp_scalable = {
	.init = (void *)otcp_scalable_init,
	.ssthresh = (void *)otcp_scalable_ssthresh,
	.cong_control = (void *)otcp_scalable_cong_control,
	.undo_cwnd = (void *)otcp_scalable_undo_cwnd,
	.name = "otcp_scalable",
};
