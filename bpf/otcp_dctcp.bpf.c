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
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "Dual BSD/GPL";

/* From include/net/tcp.h; #defines are not in BTF. */
#define TCP_ECN_DEMAND_CWR 4
#define TCP_CONG_NEEDS_ECN 0x2

/* alpha is fixed point: ALPHA_ONE is 1.0. 20 bits keep alpha's decay exact
 * enough that it reaches ~0 after a long unmarked stretch. */
#define ALPHA_SHIFT 20
#define ALPHA_ONE (1U << ALPHA_SHIFT)
#define G_SHIFT 4 /* g = 1/16 */

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
	}
	start_window(tp, ca);
}

/* Called once when an ECN-Echo starts a CWR episode (and on loss, which
 * set_state then turns into a halving): cwnd (1 - alpha / 2). */
SEC("struct_ops/otcp_dctcp_ssthresh")
__u32 BPF_PROG(otcp_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct otcp_dctcp *ca = ca_of(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u32 cut = (__u32)(((__u64)cwnd * ca->alpha) >> (ALPHA_SHIFT + 1));

	ca->loss_cwnd = cwnd;
	return cwnd - cut > 2 ? cwnd - cut : 2;
}

/* A loss is congestion DCTCP did not prevent: react as standard TCP. */
static __always_inline void react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	__u32 half = tp->snd_cwnd >> 1;

	ca_of(sk)->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = half > 2 ? half : 2;
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

SEC("struct_ops/otcp_dctcp_cong_avoid")
void BPF_PROG(otcp_dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops/otcp_dctcp_undo_cwnd")
__u32 BPF_PROG(otcp_dctcp_undo_cwnd, struct sock *sk)
{
	__u32 cwnd = tcp_of(sk)->snd_cwnd;
	__u32 before = ca_of(sk)->loss_cwnd;

	return cwnd > before ? cwnd : before;
}

/* libbpf 1.1 registers maps from ".struct_ops" (it skips ".struct_ops.link"). */
SEC(".struct_ops")
struct tcp_congestion_ops otcp_dctcp = {
	.init = (void *)otcp_dctcp_init,
	.in_ack_event = (void *)otcp_dctcp_in_ack_event,
	.ssthresh = (void *)otcp_dctcp_ssthresh,
	.set_state = (void *)otcp_dctcp_set_state,
	.cwnd_event = (void *)otcp_dctcp_cwnd_event,
	.cong_avoid = (void *)otcp_dctcp_cong_avoid,
	.undo_cwnd = (void *)otcp_dctcp_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "otcp_dctcp",
};
