module hostnet-rdma/bench

go 1.22
