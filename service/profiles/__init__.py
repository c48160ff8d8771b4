"""Privacy profiles by mechanism: computed once, cached, served to plans.

source    where plans get them: computed here (embedded) or by workers (Redis)
cache     the in-memory cache and the cache key (mechanism hash, versions)
store     the Redis store shared by every replica
task      the profile job a worker runs
epsilons  per-mechanism epsilons cached for listings
claims    trainers' claimed guarantees, checked once a profile exists
"""
