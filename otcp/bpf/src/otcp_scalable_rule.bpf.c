// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * otcp_scalable_rule: otcp_scalable's window rules (otcp_scalable.h) on a
 * window given in the context, run with BPF_PROG_TEST_RUN. The kernel runs
 * tcp_congestion_ops programs only on connections (its test-run hook for
 * struct_ops serves bpf_dummy_ops alone and refuses the others), so the
 * tests check the same C rules through this syscall program: a number of
 * ACKs of a number of segments each, or one reduction.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "otcp_scalable.h"

char _license[] SEC("license") = "Dual BSD/GPL";

#define OTCP_SC_RUN_GROW 0
#define OTCP_SC_RUN_REDUCE 1
#define OTCP_SC_RUN_MAX_ACKS (1U << 20)

/* The context: inputs, the window (in and out), and what the ACKs did. */
struct otcp_sc_run {
	__u32 op;               /* OTCP_SC_RUN_GROW or OTCP_SC_RUN_REDUCE */
	__u32 acks;             /* GROW: how many ACKs */
	__u32 acked;            /* GROW: segments each ACK acknowledges */
	__u32 increase_x256;    /* A x256 (0: one segment per round trip) */
	__u32 flags;            /* OTCP_SC_GRIDDT */
	__u32 pad;
	struct otcp_sc_window window;
	__u64 slow_start_acked;
	__u64 additive_acked;
	__u64 additive_increase;
	__u64 additive_rounds_x1024;
	__u64 scalable_acked;
	__u64 scalable_increase;
};

static long one_ack(__u32 index, void *data)
{
	struct otcp_sc_run *run = data;
	struct otcp_sc_step step;

	otcp_sc_grow(&run->window, run->acked, run->increase_x256, run->flags, &step);
	run->slow_start_acked += step.slow_start_acked;
	if (step.regime == OTCP_SC_ADDITIVE) {
		run->additive_acked += step.acked;
		run->additive_increase += step.increase;
		run->additive_rounds_x1024 += step.rounds_x1024;
	} else if (step.regime == OTCP_SC_SCALABLE) {
		run->scalable_acked += step.acked;
		run->scalable_increase += step.increase;
	}
	return 0;
}

SEC("syscall")
int otcp_scalable_rule(struct otcp_sc_run *ctx)
{
	struct otcp_sc_run run;

	/* bpf_loop's callback takes a pointer to the stack, not the context. */
	__builtin_memcpy(&run, ctx, sizeof(run));
	if (run.op == OTCP_SC_RUN_REDUCE) {
		run.window.ssthresh = otcp_sc_reduced(run.window.cwnd, run.flags);
		run.window.cwnd = run.window.ssthresh;
		run.window.frac = 0;
	} else if (run.op == OTCP_SC_RUN_GROW && run.acks <= OTCP_SC_RUN_MAX_ACKS) {
		bpf_loop(run.acks, one_ack, &run, 0);
	} else {
		return -1;
	}
	__builtin_memcpy(ctx, &run, sizeof(run));
	return 0;
}
