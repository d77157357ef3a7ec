// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * otcp_dctcp: DCTCP (Alizadeh et al., "Data Center TCP", SIGCOMM 2010) as a
 * BPF struct_ops congestion control, registered under its own name because
 * this kernel has no tcp_dctcp module and a distinct name can never be
 * confused with the kernel's.
 *
 * Sender (paper, section 3.1):
 *   - alpha is an EWMA of F, the fraction of segments delivered with an
 *     ECN-Echo during the last window of data: alpha <- (1 - g) alpha + g F,
 *     g = 1/16;
 *   - on an ECN-Echo, cwnd <- cwnd (1 - alpha / 2), at most once per window
 *     (the kernel enters CWR, calls ssthresh() once, and ignores further
 *     echoes until the window is acknowledged);
 *   - on a loss, cwnd is halved as standard TCP does.
 * Receiver: the two-state delayed-ACK machine. The ECN-Echo flag of every ACK
 * equals the CE bit of the segments it covers; when the CE bit of arriving
 * segments changes, a delayed ACK that is pending is sent at once with the
 * old state, and the next ACK is sent immediately with the new one.
 *
 * Window growth is standard TCP's (slow start, then one segment per RTT), the
 * kernel's Reno via kfunc, as DCTCP specifies.
 *
 * The window is set here, in cong_control, on every ACK, not by the kernel's
 * proportional rate reduction: on this project's kernel (6.18, x86 with the
 * SRSO "safe RET" mitigation) a struct_ops hook that returns a value now and
 * then hands the kernel garbage (a kernel text address, 0x81104110 in its
 * low bits) without our program having run; PRR then set cwnd to ~10^9 and
 * the flow flooded the bottleneck, also with a BPF Reno that only calls the
 * kernel's kfuncs (docs/dctcp.md). So ssthresh() only records DCTCP's cut;
 * cong_control applies it at once (the paper's cwnd <- cwnd (1 - alpha/2)),
 * makes the cut itself when ssthresh() was skipped, and puts back an
 * ssthresh or cwnd that is out of any possible range. Repairs are counted in
 * otcp_dctcp_st.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "otcp_cc.h"

char _license[] SEC("license") = "Dual BSD/GPL";

/* From include/net/tcp.h; #defines are not in BTF. */
#define TCP_ECN_DEMAND_CWR 4
#define TCP_CONG_NEEDS_ECN 0x2

/* alpha is fixed point: ALPHA_ONE is 1.0. 20 bits keep alpha's decay exact
 * enough that it reaches ~0 after a long unmarked stretch. */
#define ALPHA_SHIFT 20
#define ALPHA_ONE (1U << ALPHA_SHIFT)
#define G_SHIFT 4 /* g = 1/16 */

/* Counters the loader reads (otcp_bpf.dctcp.RegisteredCC.stats). */
struct otcp_dctcp_stats {
	__u64 cuts;              /* ssthresh() calls: ECN cuts (a loss episode starts with one too) */
	__u64 loss_halvings;     /* reductions for loss */
	__u64 cuts_without_hook; /* reductions cong_control made because ssthresh() did not run */
	__u64 ssthresh_repaired; /* kernel ssthresh values out of range, put back */
	__u64 cwnd_repaired;     /* kernel cwnd values out of range, put back */
	__u64 alpha_updates;     /* observation windows folded into alpha */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct otcp_dctcp_stats);
} otcp_dctcp_st SEC(".maps");

static __always_inline struct otcp_dctcp_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&otcp_dctcp_st, &zero);
}

#define COUNT(field) do { struct otcp_dctcp_stats *st_ = stats(); \
	if (st_) __sync_fetch_and_add(&st_->field, 1); } while (0)

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

/* Per-connection state, kept in icsk_ca_priv (104 bytes available). */
struct otcp_dctcp {
	__u32 window_end;       /* snd_nxt when the current observation window began */
	__u32 delivered_start;  /* tp->delivered at that moment */
	__u32 delivered_ce_start; /* tp->delivered_ce (segments ECN-echoed) at that moment */
	__u32 alpha;            /* EWMA of the marked fraction, ALPHA_ONE = 1.0 */
	__u32 loss_cwnd;        /* cwnd before the last reduction, for undo */
	__u32 ce_state;         /* receiver: CE bit of the last data segment */
	__u32 prior_rcv_nxt;    /* receiver: rcv_nxt before the last segment */
	__u32 ssthresh;         /* our slow-start threshold, the one the kernel should hold */
	__u32 in_reduction;     /* the current CWR/Recovery episode has been cut */
	__u32 good_cwnd;        /* cwnd after the last ACK, known sane */
};

static __always_inline struct otcp_dctcp *ca_of(struct sock *sk)
{
	return (struct otcp_dctcp *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct tcp_sock *tcp_of(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline void start_window(struct tcp_sock *tp, struct otcp_dctcp *ca)
{
	ca->window_end = tp->snd_nxt;
	ca->delivered_start = tp->delivered;
	ca->delivered_ce_start = tp->delivered_ce;
}

SEC("struct_ops/otcp_dctcp_init")
void BPF_PROG(otcp_dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct otcp_dctcp *ca = ca_of(sk);

	/* The paper leaves alpha's start open; 1.0 makes the first marked
	 * window halve cwnd, the conservative choice (and Linux's). */
	ca->alpha = ALPHA_ONE;
	ca->loss_cwnd = 0;
	ca->ce_state = 0;
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ssthresh = INFINITE_SSTHRESH;
	ca->in_reduction = 0;
	ca->good_cwnd = tp->snd_cwnd;
	start_window(tp, ca);
}

/* Once per window of data: fold the marked fraction of that window into alpha. */
SEC("struct_ops/otcp_dctcp_in_ack_event")
void BPF_PROG(otcp_dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct otcp_dctcp *ca = ca_of(sk);
	__u32 delivered, marked, alpha, decay;
	__u64 fraction = 0;

	if ((__s32)(tp->snd_una - ca->window_end) < 0)
		return;
	delivered = tp->delivered - ca->delivered_start;
	marked = tp->delivered_ce - ca->delivered_ce_start;
	if (delivered > 0) {
		if (marked > delivered)
			marked = delivered;
		/* g F in fixed point: marked / delivered * g * ALPHA_ONE. */
		fraction = ((__u64)marked << (ALPHA_SHIFT - G_SHIFT)) / delivered;
		alpha = ca->alpha;
		decay = alpha >> G_SHIFT;
		/* (1 - g) alpha, and let a small alpha still decay to 0. */
		if (decay == 0 && alpha > 0)
			decay = 1;
		alpha = alpha - decay + (__u32)fraction;
		ca->alpha = alpha > ALPHA_ONE ? ALPHA_ONE : alpha;
		COUNT(alpha_updates);
	}
	start_window(tp, ca);
}

static __always_inline __u32 dctcp_cut(struct otcp_dctcp *ca, __u32 cwnd)
{
	__u32 cut = (__u32)(((__u64)cwnd * ca->alpha) >> (ALPHA_SHIFT + 1));

	return cwnd - cut > 2 ? cwnd - cut : 2;
}

/* Called once when an ECN-Echo starts a CWR episode (and on loss, which
 * set_state then turns into a halving): cwnd (1 - alpha / 2). */
SEC("struct_ops/otcp_dctcp_ssthresh")
__u32 BPF_PROG(otcp_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct otcp_dctcp *ca = ca_of(sk);
	__u32 cwnd = otcp_cc_sane_cwnd(tp, ca->good_cwnd);

	ca->loss_cwnd = cwnd;
	ca->ssthresh = dctcp_cut(ca, cwnd);
	ca->in_reduction = 1;
	COUNT(cuts);
	return ca->ssthresh;
}

/* A loss is congestion DCTCP did not prevent: react as standard TCP. */
static __always_inline void react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct otcp_dctcp *ca = ca_of(sk);
	__u32 cwnd = otcp_cc_sane_cwnd(tp, ca->good_cwnd);
	__u32 half = cwnd >> 1;

	ca->loss_cwnd = cwnd;
	ca->ssthresh = half > 2 ? half : 2;
	ca->in_reduction = 1;
	tp->snd_ssthresh = ca->ssthresh;
	COUNT(loss_halvings);
}

SEC("struct_ops/otcp_dctcp_set_state")
void BPF_PROG(otcp_dctcp_set_state, struct sock *sk, __u8 new_state)
{
	if (new_state == TCP_CA_Recovery &&
	    new_state != ((struct inet_connection_sock *)sk)->icsk_ca_state)
		react_to_loss(sk);
}

static __always_inline void set_ece(struct tcp_sock *tp, __u32 ce_state)
{
	if (ce_state)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

/* The receiver's delayed-ACK state machine (paper, Figure 10). */
static __always_inline void ce_event(struct sock *sk, __u32 new_state)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = tcp_of(sk);
	struct otcp_dctcp *ca = ca_of(sk);

	if (ca->ce_state != new_state) {
		/* Segments already covered by a pending delayed ACK carried
		 * the old CE state: acknowledge them with it first. */
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			set_ece(tp, ca->ce_state);
			bpf_tcp_send_ack(sk, ca->prior_rcv_nxt);
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = new_state;
	set_ece(tp, new_state);
}

SEC("struct_ops/otcp_dctcp_cwnd_event")
void BPF_PROG(otcp_dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	switch (ev) {
	case CA_EVENT_ECN_IS_CE:
		ce_event(sk, 1);
		break;
	case CA_EVENT_ECN_NO_CE:
		ce_event(sk, 0);
		break;
	case CA_EVENT_LOSS:
		react_to_loss(sk);
		break;
	default:
		break;
	}
}

/* Every ACK: the window. In CWR and Recovery it is our threshold at once;
 * otherwise standard TCP's growth. Values the kernel got from a skipped
 * hook are put back first. */
SEC("struct_ops/otcp_dctcp_cong_control")
void BPF_PROG(otcp_dctcp_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = tcp_of(sk);
	struct otcp_dctcp *ca = ca_of(sk);
	__u8 state = icsk->icsk_ca_state;
	__u32 cwnd;

	if (otcp_cc_repair_cwnd(tp, ca->good_cwnd))
		COUNT(cwnd_repaired);
	if (state == TCP_CA_CWR || state == TCP_CA_Recovery) {
		if (!ca->in_reduction) {
			/* The kernel entered the episode but ssthresh() did not run. */
			cwnd = otcp_cc_episode_cwnd(tp, ca->good_cwnd);
			ca->loss_cwnd = cwnd;
			if (state == TCP_CA_Recovery)
				ca->ssthresh = cwnd >> 1 > 2 ? cwnd >> 1 : 2;
			else
				ca->ssthresh = dctcp_cut(ca, cwnd);
			ca->in_reduction = 1;
			COUNT(cuts_without_hook);
		}
		if (otcp_cc_hold_ssthresh(tp, ca->ssthresh))
			COUNT(ssthresh_repaired);
		if (tp->snd_cwnd > ca->ssthresh)
			tp->snd_cwnd = ca->ssthresh;
	} else {
		ca->in_reduction = 0;
		if (otcp_cc_follow_ssthresh(tp, &ca->ssthresh))
			COUNT(ssthresh_repaired);
		/* Grow on in-order delivery only (RFC 5681), as the kernel does. */
		if (flag & FLAG_DATA_ACKED)
			tcp_reno_cong_avoid(sk, ack, rs->acked_sacked);
	}
	ca->good_cwnd = tp->snd_cwnd;
}

/* Required by the kernel's checks; cong_control takes its place. */
SEC("struct_ops/otcp_dctcp_cong_avoid")
void BPF_PROG(otcp_dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops/otcp_dctcp_undo_cwnd")
__u32 BPF_PROG(otcp_dctcp_undo_cwnd, struct sock *sk)
{
	struct otcp_dctcp *ca = ca_of(sk);

	ca->in_reduction = 0;
	return otcp_cc_undo_cwnd(tcp_of(sk), ca->good_cwnd, ca->loss_cwnd);
}

/* libbpf 1.1 registers maps from ".struct_ops" (it skips ".struct_ops.link"). */
SEC(".struct_ops")
struct tcp_congestion_ops otcp_dctcp = {
	.init = (void *)otcp_dctcp_init,
	.in_ack_event = (void *)otcp_dctcp_in_ack_event,
	.ssthresh = (void *)otcp_dctcp_ssthresh,
	.set_state = (void *)otcp_dctcp_set_state,
	.cwnd_event = (void *)otcp_dctcp_cwnd_event,
	.cong_control = (void *)otcp_dctcp_cong_control,
	.cong_avoid = (void *)otcp_dctcp_cong_avoid,
	.undo_cwnd = (void *)otcp_dctcp_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "otcp_dctcp",
};
