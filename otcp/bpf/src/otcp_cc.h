/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What OTCP's struct_ops congestion controls (otcp_dctcp.bpf.c,
 * otcp_scalable.bpf.c) share: both set the window in cong_control, on every
 * ACK, because on this project's kernel a value-returning struct_ops hook
 * (ssthresh, undo_cwnd) now and then hands the kernel a garbage value without
 * the program having run (docs/bpf.md, "DCTCP"). These helpers find a sane
 * window to start from and put back a window or threshold out of any possible
 * range; each returns whether it repaired something, for the caller's
 * counters. Include after vmlinux.h.
 */
#ifndef OTCP_CC_H
#define OTCP_CC_H

#define FLAG_DATA_ACKED 0x04 /* net/ipv4/tcp_input.c: this ACK acknowledged new data */
#define INFINITE_SSTHRESH 0x7fffffff
/* No window on any path comes near 2^20 segments (1.5 GB). */
#define SANE_WINDOW (1U << 20)

/* The window now, or the last one known sane (good_cwnd) when it is out of range. */
static __always_inline __u32 otcp_cc_sane_cwnd(const struct tcp_sock *tp, __u32 good_cwnd)
{
	return tp->snd_cwnd < SANE_WINDOW ? tp->snd_cwnd : good_cwnd;
}

/* The window a CWR/Recovery episode started from when ssthresh() did not
 * run: the kernel's prior_cwnd, or the last sane one when that is not sane. */
static __always_inline __u32 otcp_cc_episode_cwnd(const struct tcp_sock *tp, __u32 good_cwnd)
{
	return tp->prior_cwnd > 0 && tp->prior_cwnd < SANE_WINDOW ? tp->prior_cwnd : good_cwnd;
}

/* A window of 0 or out of range put back to the last sane one (at least 2). */
static __always_inline int otcp_cc_repair_cwnd(struct tcp_sock *tp, __u32 good_cwnd)
{
	if (tp->snd_cwnd < SANE_WINDOW && tp->snd_cwnd != 0)
		return 0;
	tp->snd_cwnd = good_cwnd > 2 ? good_cwnd : 2;
	return 1;
}

/* In an episode: the kernel's threshold held at ours; 1 when the kernel's
 * was out of range. */
static __always_inline int otcp_cc_hold_ssthresh(struct tcp_sock *tp, __u32 ssthresh)
{
	int repaired = 0;

	if (tp->snd_ssthresh != ssthresh) {
		repaired = tp->snd_ssthresh >= SANE_WINDOW;
		tp->snd_ssthresh = ssthresh;
	}
	return repaired;
}

/* Outside an episode: a kernel threshold out of range (but not the unset,
 * infinite one) is put back to ours (1 returned); otherwise ours follows the
 * kernel's (e.g. an undo restored it). */
static __always_inline int otcp_cc_follow_ssthresh(struct tcp_sock *tp, __u32 *ssthresh)
{
	if (tp->snd_ssthresh >= SANE_WINDOW && tp->snd_ssthresh != INFINITE_SSTHRESH) {
		tp->snd_ssthresh = *ssthresh;
		return 1;
	}
	*ssthresh = tp->snd_ssthresh;
	return 0;
}

/* undo_cwnd's answer: the window before the cut (loss_cwnd) or the sane one
 * now, whichever is larger. */
static __always_inline __u32 otcp_cc_undo_cwnd(const struct tcp_sock *tp, __u32 good_cwnd, __u32 loss_cwnd)
{
	__u32 cwnd = otcp_cc_sane_cwnd(tp, good_cwnd);

	return cwnd > loss_cwnd ? cwnd : loss_cwnd;
}

#endif /* OTCP_CC_H */
