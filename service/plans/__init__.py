"""Plans from the registry: candidates loaded with their profiles, planned in a plan
process within budgets, answered in the request or as a job.

    planner   load candidates and their profiles, plan, guarantee (the request's part)
    jobs      plans that outgrow a request: jobs shared by identical requests, cached
    pool      the plan processes (``service.jobs.process_pool`` running ``tasks``)
    tasks     the pure tasks a plan process runs: plan, guarantee, explorer, frontier
    frontier  the privacy/utility frontier and the dashboard explorer's plans
"""
