# Web search: the sizes of the background flows (update flows and short messages) measured in a
# 6000-server production cluster running web search.
# Source: M. Alizadeh, A. Greenberg, D. A. Maltz, J. Padhye, P. Patel, B. Prabhakar, S. Sengupta,
# M. Sridharan, "Data Center TCP (DCTCP)", ACM SIGCOMM 2010, Figure 4 (flow size distribution of
# background traffic).
# The points are those of the figure as pFabric (M. Alizadeh et al., "pFabric: Minimal Near-Optimal
# Datacenter Transport", ACM SIGCOMM 2013) read it for its "web search" workload, used since by PIAS,
# Homa, HPCC and others: there in 1460-byte packets, here in bytes (packets x 1460).
# The distribution is piecewise linear between the points; the first point's fraction is the share of
# flows of exactly its size. Mean: 1.67 MB.
#
# size_bytes  cumulative_fraction
8760 0.15
18980 0.20
27740 0.30
48180 0.40
77380 0.53
194180 0.60
973820 0.70
1946180 0.80
4866180 0.90
9733820 0.97
29200000 1.00
