"""DeepSummit: P(summit) for a Himalayan expedition member, as an orchestrated ML pipeline.

Packages, each importing only those below it (the layers contract in pyproject.toml, checked by
`lint-imports` in `make test`):

    cli                    the `deepsummit` command
    flows | services       Prefect flows and tasks | the local service supervisor
    backtest               season-by-season and push-day backtests
    train                  training, evaluation, registration behind the champion gate
    serve                  scoring planned attempts, the outlook
    drift                  input drift against the champion
    features               attempts, weather windows, tabular features, the snapshot
    weather | records      daily weather | the Himalayan Database records
    contracts              what stages exchange: planned attempts, arrays, preprocessing,
                           calibration, distribution profiles, member groups, the model
                           artifact, the champion
    core                   settings, errors, the run context, the warehouse, the input spec,
                           seasons
    model                  the PyTorch network (torch only)
"""
