"""The end-to-end check users run on their own cluster (`hostnet-rdma e2e`), and the cluster
test tier runs on the namespace cluster: a 2-node job per launcher, plain `torchrun` as users
write it, through the installed webhook.

jobs.py     the job shapes, one per launcher (pure: parameters in, manifests out)
train.py    the script the jobs run (inside the training image: torch only)
outcome.py  a job's pods and logs in, its verdict out (pure)
run.py      the shell: creates a namespace, submits, waits, reads back, deletes (app.kube)
"""
