// SPDX-License-Identifier: (GPL-2.0 OR MIT)
// poolcap's XDP program: hand every frame of receive queue q to the AF_XDP socket that
// poolcap registered for q in `xsks`; pass frames of queues without a socket to the stack.
// Each frame carries its receive time (CLOCK_MONOTONIC, ns) in the 8 bytes of XDP metadata
// just before it, which the kernel copies into the UMEM frame with the packet.
//
// Built with: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -c xsk_redirect.c
// The compiled object is committed (xsk_redirect.o) and embedded, so building poolcap needs
// no clang; a test rebuilds it when clang is present and compares.
#include <linux/bpf.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)BPF_FUNC_redirect_map;
static long (*bpf_xdp_adjust_meta)(struct xdp_md *ctx, int delta) = (void *)BPF_FUNC_xdp_adjust_meta;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp")
int poolcap_xsk(struct xdp_md *ctx)
{
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(__u64)) == 0) {
		__u64 *meta = (void *)(long)ctx->data_meta;
		if ((void *)(meta + 1) <= (void *)(long)ctx->data)
			*meta = bpf_ktime_get_ns();
	}
	// The flags argument is the action when the map has no socket for this queue.
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

// The same without the receive time, for kernels that refuse bpf_xdp_adjust_meta to XDP
// programs (6.18.44-fc-v1300: "program of this type cannot use helper
// bpf_xdp_adjust_meta#54"); poolcap then stamps frames when it reads them.
SEC("xdp")
int poolcap_xsk_plain(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
