"""The webhook process: the HTTP server and its protocol bounds (server, protocol, settings),
TLS and the certificate files it watches (tls, filewatch), and the review itself (review: an
AdmissionReview in, one out, around the pure core). `hostnet-rdma serve` runs it."""
