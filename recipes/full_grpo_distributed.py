"""Full GRPO sharded with FSDP2.   ftune run --nproc_per_node 2 full_grpo_distributed --config smollm2/135M_full_grpo

The policy and its frozen reference are sharded over the ranks; each rank samples the completions
of its share of the prompts (the weights gathered for the rollout, the draws seeded per prompt). This
is full_grpo_single_device plus the lines tagged # [dist] (tests/recipes/test_skeleton.py checks it).
"""

import torch

from ftune import checkpointing, config, data, training

# The settings this recipe reads (keys, types, defaults, help). A copy may define its own dataclass
# (subclass this one, add fields with config.setting): `ftune run/validate/--help` read it from here.
SETTINGS = training.GRPOSettings  # [grpo+full]


def main(cfg: config.Config) -> None:
    s = cfg.settings(SETTINGS)
    training.seed_everything(s.seed)
    device = training.get_device(s.device)
    info = training.init_distributed(device, timeout_s=s.dist_timeout_s)  # [dist]
    mesh = training.device_mesh(device, info, s.tensor_parallel_dim, s.context_parallel_dim)  # [dist]
    dtype = training.resolve_dtype(s.dtype, cfg, device)  # says which is faster here; "auto" picks
    ckpt = config.instantiate(cfg.checkpointer)
    loaded = ckpt.load()  # the base model, or the newest step folder with resume_from_checkpoint=auto

    model = training.build_model(
        cfg.model, loaded.model, device=device, dtype=dtype, checkpoint_dir=ckpt.checkpoint_dir
    )  # config.json is checked against the model the config builds
    reference = training.ReferenceModel.frozen(  # [ref+full] the base checkpoint, frozen (also resuming)
        training.build_model(
            cfg.model, ckpt.load_base_model(), device=device, dtype=dtype, checkpoint_dir=ckpt.checkpoint_dir
        )
    )
    if s.activation_checkpointing:
        training.apply_activation_checkpointing(model)
    if s.activation_offloading:
        training.apply_activation_offloading(model, device)
    training.shard_model(model, s.fsdp_reshard_after_forward, s.fsdp_cpu_offload, mesh=mesh)  # [dist]
    training.shard_model(  # [ref+full+dist] the reference, sharded (and split) like the policy
        reference.model, s.fsdp_reshard_after_forward, s.fsdp_cpu_offload, mesh=mesh
    )
    if s.compile:
        training.compile_model(model)

    tokenizer = config.instantiate(cfg.tokenizer)
    checkpointing.check_tokenizer_fits(tokenizer.vocab_size, model)
    collate = training.build_prompt_collate(cfg.collate_fn)  # [grpo] prompts and their records
    loader = data.build_dataloader(
        config.instantiate(cfg.dataset, tokenizer),
        batch_size=s.batch_size,
        collate_fn=collate,
        shuffle=s.shuffle,
        seed=s.seed,
        rank=mesh.data_rank,  # [dist] tp and cp ranks of a row read the same batch
        world_size=mesh.data_ranks,  # [dist]
    )
    val_loader = training.validation_loader(
        config.instantiate(cfg.dataset_val, tokenizer), batch_size=s.batch_size, collate_fn=collate
    )

    loss_fn = config.instantiate(cfg.loss)
    if s.compile:
        loss_fn = training.compile_loss(loss_fn)

    sampling = training.Sampling.of(s, tokenizer)  # [grpo] G, length, temperature, top-k/p, stop tokens
    rewards = config.instantiate(cfg.rewards)  # [grpo] the reward functions and their weights

    def rollout_on(prompts: training.PromptBatch, epoch: int) -> training.RolloutBatch:  # [grpo]
        """G completions of each prompt, scored: one micro-batch."""  # [grpo]
        rollout = training.sample_rollout(model, prompts, sampling, epoch=epoch)  # [grpo] KV cache
        scores = training.score_rollout(rewards, tokenizer, prompts, rollout)  # [grpo] every reward
        return training.rollout_batch(  # [grpo] advantages, old and reference log-probabilities
            rollout,
            scores,
            loss_fn,
            policy=model,
            reference=reference,
            device=device,
            scale_rewards=s.scale_rewards,
            keep_old_logps=s.num_iterations > 1,
            padding_free=s.padding_free,
        )

    def loss_on(batch: training.MicroBatch) -> training.Loss:
        """A micro-batch's forward and loss: the training step and validation both call this."""
        hidden = model.hidden(batch.tokens, **batch.model_inputs)  # (b, s, dim); images when it has them
        return training.grpo_loss(loss_fn, model, hidden, batch)  # [grpo] clipped ratio + KL

    loader = training.RolloutLoader(  # [grpo] prompts in, scored rollouts out (num_iterations times)
        loader, rollout_on, grad_accum_steps=s.grad_accum_steps, num_iterations=s.num_iterations
    )
    val_loader = training.RolloutLoader.for_validation(val_loader, rollout_on)  # [grpo] same draws

    params = training.trainable_params(model)
    optimizer = training.build_optimizer(cfg.optimizer, params, in_backward=s.optimizer_in_backward)
    steps = training.total_steps(
        max_steps=s.max_steps,
        epochs=s.epochs,
        batches_per_epoch=len(loader),
        grad_accum_steps=s.grad_accum_steps,
    )
    scheduler = config.instantiate(cfg.lr_scheduler, optimizer, num_training_steps=steps)
    step = training.restore(
        loaded.recipe_state, model=model, optimizer=optimizer, scheduler=scheduler, loader=loader
    )
    report = training.Reporter(
        config.instantiate(cfg.metric_logger),
        total=steps,
        initial=step,
        device=device,
        log_every_n_steps=s.log_every_n_steps,
        progress_bar=s.progress_bar,
    )

    def save(step: int) -> None:
        run = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "loader": loader}
        training.save_checkpoint(ckpt, step, **run)  # [full]

    profile = training.Profiler(enabled=s.profile, output_dir=f"{s.output_dir}/profile")
    stop = training.StopOnSignal(s.stop_grace_s)  # SIGTERM / Ctrl-C: save, then stop (a bounded wait)
    with profile as profiler, stop:
        while step < steps and not stop.stopped:
            for micro_batches in training.accumulate(loader, s.grad_accum_steps, device=device):
                # The training step. StepLoss divides by the step's count (all micro-batches, all
                # ranks) and refuses a non-finite loss or gradient norm.
                step_loss = training.StepLoss(  # [grpo] normalised as loss.loss_type says
                    micro_batches, optimizer, step=step + 1, device=device, per=loss_fn.per
                )
                for batch in micro_batches:
                    step_loss.scaled(loss_on(batch)).backward()
                grad_norm = None
                if s.clip_grad_norm is not None:
                    grad_norm = torch.nn.utils.clip_grad_norm_(params, s.clip_grad_norm)
                stats = step_loss.finish(grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if scheduler is not None:
                    scheduler.step()
                step += 1

                report.add_timings(loader.take_seconds())  # [grpo] time/rollout_s: sampling and scoring
                report.step(step, stats, training.count_tokens(micro_batches))
                profiler.step()
                if val_loader is not None and training.every(step, s.run_val_every_n_steps):
                    val = training.validate(
                        loss_on, model, val_loader, device=device, max_batches=s.max_val_batches
                    )
                    report.log(step, val)
                if step == steps or stop.check():
                    break
                if training.every(step, s.save_every_n_steps):
                    save(step)
    save(step)
    report.close()
    training.destroy_distributed()  # [dist]
    stop.exit_if_stopped(step, s.output_dir)


if __name__ == "__main__":
    config.run(main)
