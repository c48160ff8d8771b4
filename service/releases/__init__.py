"""Releases: a plan turned into a served model, within the dataset's cap.

retarget    plan, charge the ledger, merge or draw, store (same request, same release)
artifacts   the release's files: the merge or the drawn model
bundles     releasing bundles: merged shards, model card and privacy.json
pending     large merges after the request: the budget reserved at once
merge_jobs  those merges as jobs on the merge queue (or in the API process)
"""
