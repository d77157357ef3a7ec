// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * otcp_mark: ECN marking for a shaped egress port, as a tc clsact egress
 * (cls_bpf, direct-action) program in front of the port's root qdisc.
 *
 * The classifier runs before the qdisc enqueues, so it cannot see the
 * qdisc's queue; it follows it with a virtual queue (HULL's phantom queue):
 * every packet adds its bytes, and the queue drains at the shaped rate. A
 * packet that arrives while the virtual queue holds more than K bytes is
 * marked CE if it is ECN-capable (ECT(0) or ECT(1)), as a DCTCP switch marks
 * on the instantaneous queue. Packets that are not ECN-capable are never
 * changed; the qdisc drops them when its buffer is full, as before.
 *
 * A packet that would overflow the configured buffer (limit_bytes, 0 for
 * none) is not added: the real qdisc drops it.
 *
 * A shaper with a token bucket (HTB, TBF) sends up to its burst at once
 * after an idle spell, so its queue stays empty where a plain phantom queue
 * would grow. burst_bytes models that: capacity the queue did not use
 * accumulates as credit up to burst_bytes, and an arrival to an empty queue
 * spends credit instead of queueing. 0 gives HULL's plain phantom queue.
 *
 * The loader sets struct otcp_mark_config and reads struct otcp_mark_queue;
 * otcp_bpf/marker.py mirrors both layouts (a test checks them against BTF).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char _license[] SEC("license") = "Dual BSD/GPL";

#define TC_ACT_OK 0
#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP_ 6
#define ECN_MASK 3
#define ECN_CE 3
#define NSEC_PER_SEC 1000000000ULL

struct otcp_mark_config {
	__u64 rate_bytes_per_s; /* drain rate of the virtual queue (the shaped rate) */
	__u64 k_bytes;          /* marking threshold K */
	__u64 limit_bytes;      /* the real buffer; 0: no limit */
	__u64 burst_bytes;      /* the shaper's token bucket; 0: none */
};

struct otcp_mark_queue {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 backlog_bytes;    /* virtual queue after the last arrival */
	__u64 last_ns;          /* bpf_ktime_get_ns() (CLOCK_MONOTONIC) of that arrival */
	__u64 credit_bytes;     /* unused capacity, up to burst_bytes */
	__u64 backlog_max;      /* largest backlog seen by an arriving packet */
	__u64 backlog_sum;      /* sum of the backlog seen by arriving packets */
	__u64 packets;          /* packets seen */
	__u64 bytes;            /* their bytes on the wire (GSO packets counted per segment) */
	__u64 ect;              /* IP packets that arrived ECT(0) or ECT(1) */
	__u64 marked;           /* ECT packets this program set to CE */
	__u64 ce_arrived;       /* packets that arrived already CE */
	__u64 not_ect_over_k;   /* not-ECT packets that arrived over K (left unmarked) */
	__u64 over_limit;       /* packets that would overflow limit_bytes */
	__u64 mark_errors;      /* marks the kernel refused to write */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct otcp_mark_config);
} otcp_mark_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct otcp_mark_queue);
} otcp_mark_q SEC(".maps");

/* Bytes the queue drains in dt_ns at rate (rate < 2^34 B/s, checked by the loader). */
static __always_inline __u64 drained(__u64 dt_ns, __u64 rate)
{
	if (dt_ns < (1ULL << 30))
		return dt_ns * rate / NSEC_PER_SEC;
	if (dt_ns < (1ULL << 40))
		return (dt_ns / 1000) * rate / 1000000;
	return ~0ULL;
}

/* What the packet is: its ECN codepoint (or -1 when not IP) and its header
 * length, to count a GSO packet as the segments the qdisc will count. */
struct pkt_info {
	int ecn;
	int ipv6;
	__u32 hdr_len;
};

static __always_inline int parse(struct __sk_buff *skb, struct pkt_info *info)
{
	__u8 b[2];
	__u8 proto, tcp_off;
	__u32 l4;

	info->ecn = -1;
	info->ipv6 = 0;
	info->hdr_len = ETH_HLEN;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN, b, 2))
			return -1;
		if ((b[0] >> 4) != 4)
			return -1;
		info->ecn = b[1] & ECN_MASK;
		l4 = ETH_HLEN + (b[0] & 0xf) * 4;
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 9, &proto, 1))
			return 0;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN, b, 2))
			return -1;
		if ((b[0] >> 4) != 6)
			return -1;
		info->ipv6 = 1;
		info->ecn = (b[1] >> 4) & ECN_MASK;
		l4 = ETH_HLEN + 40;
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 6, &proto, 1))
			return 0;
	} else {
		return -1;
	}
	info->hdr_len = l4;
	if (proto == IPPROTO_TCP_ && !bpf_skb_load_bytes(skb, l4 + 12, &tcp_off, 1))
		info->hdr_len = l4 + (tcp_off >> 4) * 4;
	return 0;
}

/* Sets CE in the IP header; IPv4 also gets its checksum fixed. */
static __always_inline int set_ce(struct __sk_buff *skb, const struct pkt_info *info)
{
	__u8 b[2], nb[2];

	if (bpf_skb_load_bytes(skb, ETH_HLEN, b, 2))
		return -1;
	nb[0] = b[0];
	if (info->ipv6) {
		nb[1] = b[1] | (ECN_CE << 4);
		return bpf_skb_store_bytes(skb, ETH_HLEN + 1, &nb[1], 1, 0);
	}
	nb[1] = b[1] | ECN_CE;
	/* The checksum covers 16-bit words: replace the word holding TOS. */
	if (bpf_l3_csum_replace(skb, ETH_HLEN + 10, *(__u16 *)b, *(__u16 *)nb, 2))
		return -1;
	return bpf_skb_store_bytes(skb, ETH_HLEN + 1, &nb[1], 1, 0);
}

SEC("tc")
int otcp_mark(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct otcp_mark_config *cfg = bpf_map_lookup_elem(&otcp_mark_cfg, &zero);
	struct otcp_mark_queue *q = bpf_map_lookup_elem(&otcp_mark_q, &zero);
	struct pkt_info info;
	__u64 now = bpf_ktime_get_ns();
	__u64 wire, seen, drain, backlog, room;
	int ip, mark = 0;

	if (!cfg || !q)
		return TC_ACT_OK;
	ip = parse(skb, &info) == 0;
	wire = skb->len;
	if (skb->gso_segs > 1)
		wire += (__u64)(skb->gso_segs - 1) * info.hdr_len;

	bpf_spin_lock(&q->lock);
	if (now > q->last_ns) {
		drain = drained(now - q->last_ns, cfg->rate_bytes_per_s);
		backlog = q->backlog_bytes;
		if (drain >= backlog) {
			/* The queue emptied; what was left of the capacity is credit. */
			drain -= backlog;
			q->backlog_bytes = 0;
			room = cfg->burst_bytes > q->credit_bytes ? cfg->burst_bytes - q->credit_bytes : 0;
			q->credit_bytes = drain >= room ? cfg->burst_bytes : q->credit_bytes + drain;
		} else {
			q->backlog_bytes = backlog - drain;
		}
		q->last_ns = now;
	}
	seen = q->backlog_bytes;
	q->packets++;
	q->bytes += wire;
	q->backlog_sum += seen;
	if (seen > q->backlog_max)
		q->backlog_max = seen;
	if (cfg->limit_bytes && seen + wire > cfg->limit_bytes) {
		q->over_limit++;
	} else {
		if (seen == 0 && q->credit_bytes >= wire)
			q->credit_bytes -= wire; /* sent at once on the bucket's tokens */
		else
			q->backlog_bytes = seen + wire;
		if (ip) {
			if (info.ecn == ECN_CE)
				q->ce_arrived++;
			else if (info.ecn != 0)
				q->ect++;
			if (seen > cfg->k_bytes) {
				if (info.ecn == 1 || info.ecn == 2) {
					q->marked++;
					mark = 1;
				} else if (info.ecn == 0) {
					q->not_ect_over_k++;
				}
			}
		}
	}
	bpf_spin_unlock(&q->lock);

	if (mark && set_ce(skb, &info))
		__sync_fetch_and_add(&q->mark_errors, 1);
	return TC_ACT_OK;
}
