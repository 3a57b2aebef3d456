"""A campaign across many boxes: Redis as the hub, the user's own scheduler as the launcher.

``mambafuzz fuzz ... --fleet redis://HOST:PORT/DB`` makes the process one
worker (a session: one per worker process) of a campaign.  Nothing here
schedules boxes: Slurm, Kubernetes or ssh start them, and they meet on the hub.

- ``hub``: the connection, the key layout, the campaign's record;
- ``box``: who a worker is (box, GPU, driver, versions) and each target's source digest;
- ``leases``: targets taken with a time to live, renewed, given back; counts per box;
- ``buckets``: what failed, as a key; the smallest case per bucket, its count and boxes;
- ``outbox``: a finding on its way to the hub, kept beside the crash folder until it is there;
- ``confirm``: a bucket counts once a replay on a box of the same kind says it fails;
- ``worker``: the loop a worker runs (handed to ``run/`` as an object, so run/ imports nothing here);
- ``collect``: the campaign as crash files and a summary; ``command``: what the CLI calls.

The modules load on use: ``import mambafuzz.fleet`` imports nothing heavy.
"""
