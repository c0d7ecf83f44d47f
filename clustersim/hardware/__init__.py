"""Hardware catalog: GPU specs (:mod:`.gpus`) and cluster presets (:mod:`.presets`)."""
