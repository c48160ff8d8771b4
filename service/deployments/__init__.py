"""Deployments: a name serving the current release of a dataset under a policy, and
the notifications that announce each change.

    policies       create a deployment, change its policy (a new release), its history
    outbox         deployment work recorded with its request, queued after the commit
    runner         one attempt at an outbox item (a policy change or a notification)
    notifications  signed callbacks, one POST per attempt, retries on the queue
    callbacks      which callback URLs a deployment may name (no server-side forgery)
    signing        HMAC-SHA256 signatures of webhooks, in and out
"""
