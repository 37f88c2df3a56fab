"""The default study shrunk to a smoke run (tests/study/test_study.py): 1 epoch, a few seeds, a 3-step
warm-start, genenv and static at one seed (random is genenv without RWR: tests/integration/test_loop.py)."""

from genenv_jax.configs import study


def get_config():
    s = study.get_config()
    s.modes = ("genenv", "static")
    s.seeds = (0,)
    s.sweep_alphas = ()
    s.tokenizer_vocab_size = 320
    r = s.run
    r.epochs = 1
    r.domain.options.per_level = {"train": 3, "validation": 1, "test": 1}
    r.warmstart.update(agent_steps=3, simulator_steps=3, batch_size=4)
    r.update(seeds_per_epoch=10, new_tasks_per_epoch=8, rollouts_per_task=2, static_variants_per_seed=2)
    r.agent.train.tasks_per_step = 4
    r.simulator.train.tasks_per_step = 4
    r.simulator.sampling.max_prompt_len = 256  # the 320-piece tokenizer makes its prompts longer
    r.log.progress_bars = False
    for model in (r.agent, r.simulator):
        model.scan_layers = True  # one compiled layer body: compiles in about half the time
    return s
