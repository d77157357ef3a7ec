/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The window rules of otcp_scalable, in one place: the congestion control
 * (otcp_scalable.bpf.c) applies them to connections, and a syscall program
 * (otcp_scalable_rule.bpf.c) runs them on given windows under
 * BPF_PROG_TEST_RUN, which the kernel refuses for tcp_congestion_ops
 * programs (tests/test_bpf_scalable.py).
 *
 * Scalable TCP (T. Kelly), above the legacy window lwnd:
 *   per segment acknowledged in congestion avoidance: cwnd += a;
 *   per window with a loss:                             cwnd -= b * cwnd;
 *   (lwnd, a, b) = (16, 0.01, 0.125).
 * At or below lwnd the standard AIMD rule: cwnd grows by A segments per round
 * trip (A / cwnd per segment acknowledged) and is halved on a loss; A is
 * GridDT's per-connection additive increase (S. Ravot), 1 unless the
 * connection's destination has an entry. With OTCP_SC_GRIDDT the AIMD rule
 * holds at every window (GridDT proper: no Scalable regime).
 *
 * "Per ACK" is per segment acknowledged, as RFC 3465 counts and Linux's
 * tcp_scalable does: with delayed ACKs one ACK covers two segments, and
 * counting ACKs would halve a (Kelly, Ravot and Martin-Flatin, "High-Performance
 * Data Transport for Grid Applications", TERENA 2003, on delayed ACKs).
 */
#ifndef OTCP_SCALABLE_H
#define OTCP_SCALABLE_H

#define OTCP_SC_LWND 16        /* segments: lwnd */
#define OTCP_SC_A_DIVISOR 100  /* a = 1 / 100 segment per segment acknowledged */
#define OTCP_SC_B_SHIFT 3      /* b = 1 / 8 */
#define OTCP_SC_INCREASE_SHIFT 8 /* A is fixed point: 256 is one segment per round trip */
#define OTCP_SC_INCREASE_ONE (1U << OTCP_SC_INCREASE_SHIFT)
#define OTCP_SC_FRAC_SHIFT 32  /* growth below a whole segment, in 2^-32 segments */
#define OTCP_SC_MAX_ACKED (1U << 20) /* no ACK covers more segments than this */

/* Flags of a destination's entry. */
#define OTCP_SC_GRIDDT 1       /* AIMD with A at every window (no Scalable regime) */

/* What the rule grew by (enum, not flags). */
#define OTCP_SC_ADDITIVE 1
#define OTCP_SC_SCALABLE 2

struct otcp_sc_window {
	__u64 frac;     /* growth not yet a whole segment, 2^-32 segments */
	__u32 cwnd;     /* segments */
	__u32 ssthresh; /* segments */
	__u32 clamp;    /* segments: the kernel's snd_cwnd_clamp */
	__u32 pad;
};

/* What one ACK did. */
struct otcp_sc_step {
	__u32 slow_start_acked; /* segments acknowledged below ssthresh */
	__u32 acked;            /* segments acknowledged in congestion avoidance */
	__u32 increase;         /* whole segments cwnd grew in congestion avoidance */
	__u32 regime;           /* OTCP_SC_ADDITIVE or OTCP_SC_SCALABLE (0: slow start only) */
	__u64 rounds_x1024;     /* additive regime: acked / cwnd, round trips' worth of ACKs x 1024 */
};

static __always_inline __u32 otcp_sc_increase_x256(__u32 increase_x256)
{
	return increase_x256 ? increase_x256 : OTCP_SC_INCREASE_ONE;
}

/* One ACK of `acked` segments: slow start up to ssthresh (one segment per
 * segment acknowledged, as the kernel's tcp_slow_start), the rest by the
 * regime's increase, never above the clamp. */
static __always_inline void otcp_sc_grow(struct otcp_sc_window *w, __u32 acked, __u32 increase_x256, __u32 flags,
					 struct otcp_sc_step *step)
{
	__u64 add, cwnd;
	__u32 whole;

	step->slow_start_acked = 0;
	step->acked = 0;
	step->increase = 0;
	step->regime = 0;
	step->rounds_x1024 = 0;
	if (acked > OTCP_SC_MAX_ACKED)
		acked = OTCP_SC_MAX_ACKED;
	if (w->cwnd == 0)
		w->cwnd = 1;
	if (w->cwnd < w->ssthresh) {
		cwnd = (__u64)w->cwnd + acked;
		if (cwnd > w->ssthresh)
			cwnd = w->ssthresh;
		step->slow_start_acked = (__u32)cwnd - w->cwnd;
		acked -= step->slow_start_acked;
		w->cwnd = cwnd < w->clamp ? (__u32)cwnd : w->clamp;
		if (!acked)
			return;
	}
	/* Quotients are rounded up (by under 2^-32 segment per ACK), so that
	 * cwnd ACKs of A / cwnd, or 100 of 1 / 100, add up to whole segments. */
	if ((flags & OTCP_SC_GRIDDT) || w->cwnd <= OTCP_SC_LWND) {
		add = (((__u64)acked * otcp_sc_increase_x256(increase_x256))
		       << (OTCP_SC_FRAC_SHIFT - OTCP_SC_INCREASE_SHIFT)) + w->cwnd - 1;
		add /= w->cwnd;
		step->regime = OTCP_SC_ADDITIVE;
		step->rounds_x1024 = ((__u64)acked << 10) / w->cwnd;
	} else {
		add = (((__u64)acked << OTCP_SC_FRAC_SHIFT) + OTCP_SC_A_DIVISOR - 1) / OTCP_SC_A_DIVISOR;
		step->regime = OTCP_SC_SCALABLE;
	}
	step->acked = acked;
	w->frac += add;
	whole = (__u32)(w->frac >> OTCP_SC_FRAC_SHIFT);
	w->frac &= (1ULL << OTCP_SC_FRAC_SHIFT) - 1;
	if (whole) {
		cwnd = (__u64)w->cwnd + whole;
		if (cwnd > w->clamp)
			cwnd = w->clamp;
		if (cwnd > w->cwnd) {
			step->increase = (__u32)cwnd - w->cwnd;
			w->cwnd = (__u32)cwnd;
		}
	}
}

/* The window after a loss (or a congestion notice) at `cwnd`: Scalable's
 * cwnd - b cwnd above lwnd, standard halving at or below it (and always with
 * OTCP_SC_GRIDDT); never below 2 segments. */
static __always_inline __u32 otcp_sc_reduced(__u32 cwnd, __u32 flags)
{
	__u32 next;

	if (!(flags & OTCP_SC_GRIDDT) && cwnd > OTCP_SC_LWND)
		next = cwnd - (cwnd >> OTCP_SC_B_SHIFT);
	else
		next = cwnd >> 1;
	return next > 2 ? next : 2;
}

/* Whether a reduction at `cwnd` is Scalable's (else a halving). */
static __always_inline int otcp_sc_scalable_cut(__u32 cwnd, __u32 flags)
{
	return !(flags & OTCP_SC_GRIDDT) && cwnd > OTCP_SC_LWND;
}

#endif
