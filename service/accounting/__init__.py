"""Pure privacy accounting: numpy, scipy and dp_accounting; no I/O, no web, no database.

Grouped by concept, each subpackage below the ones that use it (an import-linter
contract in pyproject.toml keeps it one-way):

    planning/       plans and guarantees: which models, with which weights (uses lc, rs)
    lc/             linear combination: the merged step's mixture, its RDP and PLD
    rs/             random selection: Theorems 5.1 and 5.2
    joint_release   Theorem 6.1 for many models with few distinct mechanisms
    profiles/       per-model privacy profiles, one builder per mechanism type, claims
    bis/            balanced iteration subsampling (RDP both ways, a certified PLD)
    pld/            privacy loss distributions: PMFs, composition, resolution, curves
    rdp/            Renyi DP of Gaussian mechanisms and the continuous order search
    cost            what a profile costs, estimated before it is computed
    mechanisms/     the validated mechanism records the registry stores
    conversions     RDP -> (epsilon, delta), rounding that never understates
"""
