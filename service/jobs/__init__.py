"""The job machinery, which knows no use case: the queue (RQ on Redis, or a bounded pool
in the API process), the worker, a pool of limited child processes, and the counters
and caches they share.

    queue          InProcessJobs and RQJobs: submit a job by kind, look it up
    worker         `retarget worker`'s RQ worker, with a periodic drain
    process_pool   persistent child processes with deadlines and memory limits
    process_child  what runs inside one of them
    local_pool     the embedded mode's bounded thread pool with a delay heap
    lru, metrics   a bounded LRU map; counters and their Prometheus exposition

What each kind of job runs is the application's task table, ``service.tasks``.
"""
