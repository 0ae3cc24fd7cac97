"""Full PPO (online RL, RLHF) on one device.   ftune run ppo_full_finetune_single_device --config smollm2/135M_ppo

torchtune 0.6.1's PPO recipe of the same name, its config keys where they mean the same: the policy
(every weight trains), a value model (a decoder with a score head, from `value_checkpointer`: trained
with the policy, one optimizer), a frozen reward model (`reward_checkpointer`: a reward_model recipe's
step folder, or any score-head model) and a frozen reference (the policy's base checkpoint). Each
batch of prompts is sampled once on the KV cache (`rollout_on`: one response a prompt, scored, valued,
KL-penalised rewards, GAE advantages), then trained on for ppo_epochs passes of ppo_batch_size-row
steps (training.PPOLoader); `loss_on` is the clipped policy loss plus the clipped value loss
(ftune.training.PPOLoss). This is full_finetune_single_device plus the lines tagged # [ppo], without
the supervised lines tagged # [sft].
"""

import torch

from ftune import checkpointing, config, data, training

# The settings this recipe reads (keys, types, defaults, help). A copy may define its own dataclass
# (subclass this one, add fields with config.setting): `ftune run/validate/--help` read it from here.
SETTINGS = training.PPOSettings  # [ppo+full]


def main(cfg: config.Config) -> None:
    s = cfg.settings(SETTINGS)
    training.seed_everything(s.seed)
    device = training.get_device(s.device)
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
    value_ckpt = config.instantiate(cfg.value_checkpointer)  # [ppo] a score-head model; it trains
    value_model = training.build_value_model(value_ckpt, device=device, dtype=dtype)  # [ppo] trains
    reward_ckpt = config.instantiate(cfg.reward_checkpointer)  # [ppo] a reward model, frozen
    reward_model = training.build_reward_model(reward_ckpt, device=device, dtype=dtype)  # [ppo]
    if s.activation_checkpointing:
        training.apply_activation_checkpointing(model)
    if s.activation_offloading:
        training.apply_activation_offloading(model, device)
    if s.compile:
        training.compile_model(model)

    tokenizer = config.instantiate(cfg.tokenizer)
    checkpointing.check_tokenizer_fits(tokenizer.vocab_size, model)
    collate = training.build_prompt_collate(cfg.collate_fn)  # [ppo] prompts and their records
    loader = data.build_dataloader(
        config.instantiate(cfg.dataset, tokenizer),
        batch_size=s.batch_size,
        collate_fn=collate,
        shuffle=s.shuffle,
        seed=s.seed,
    )
    val_loader = training.validation_loader(
        config.instantiate(cfg.dataset_val, tokenizer), batch_size=s.batch_size, collate_fn=collate
    )

    loss_fn = config.instantiate(cfg.loss)
    if s.compile:
        loss_fn = training.compile_loss(loss_fn)

    sampling = training.ppo_sampling(s, tokenizer)  # [ppo] one response a prompt, its length and stops
    kl = training.kl_controller(s.kl_coeff, target=s.kl_target, horizon=s.kl_horizon)  # [ppo] beta

    def rollout_on(prompts: training.PromptBatch, epoch: int) -> training.Trajectory:  # [ppo]
        """A response to each prompt, scored, valued and turned into advantages."""  # [ppo]
        rollout = training.sample_rollout(model, prompts, sampling, epoch=epoch)  # [ppo] KV cache
        return training.ppo_trajectory(  # [ppo] rewards (KL penalty + score), GAE, whitening
            rollout,
            policy=model,
            value_model=value_model,
            reward_model=reward_model,
            reference=reference,
            max_new_tokens=s.max_generated_tokens,
            stop_ids=list(sampling.stop_ids),
            kl_coeff=kl.value,
            gamma=s.gamma,
            lmbda=s.lmbda,
            penalise_no_eos=s.penalise_no_eos,
            min_response_length=s.min_response_length,
            reward_penalty=s.reward_penalty,
        )

    def loss_on(batch: training.MicroBatch) -> training.Loss:
        """A micro-batch's forward and loss: the training step and validation both call this."""
        hidden = model.hidden(batch.tokens, **batch.model_inputs)  # (b, s, dim); images when it has them
        return training.ppo_loss(loss_fn, model, hidden, value_model, batch)  # [ppo] policy + value

    loader = training.PPOLoader(  # [ppo] prompts in; each trajectory served ppo_epochs times, shuffled
        loader,
        rollout_on,
        batch_size=s.batch_size,
        ppo_batch_size=s.ppo_batch_size,
        ppo_epochs=s.ppo_epochs,
        grad_accum_steps=s.grad_accum_steps,
        seed=s.seed,
        kl=kl,
    )
    val_loader = training.PPOLoader.for_validation(val_loader, rollout_on)  # [ppo] same draws

    params = training.trainable_params(model)
    params = params + training.trainable_params(value_model)  # [ppo] one optimizer for policy and value
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
        training.save_weights(value_ckpt, step, value_model)  # [ppo] under value_checkpointer.output_dir

    profile = training.Profiler(enabled=s.profile, output_dir=f"{s.output_dir}/profile")
    stop = training.StopOnSignal(s.stop_grace_s)  # SIGTERM / Ctrl-C: save, then stop (a bounded wait)
    with profile as profiler, stop:
        while step < steps and not stop.stopped:
            for micro_batches in training.accumulate(loader, s.grad_accum_steps, device=device):
                # The training step. StepLoss divides by the step's count (all micro-batches, all
                # ranks) and refuses a non-finite loss or gradient norm.
                step_loss = training.StepLoss(  # [ppo] a mean of the micro-batches' means
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

                report.add_timings(loader.take_seconds())  # [ppo] time/rollout_s: sampling and scoring
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
    stop.exit_if_stopped(step, s.output_dir)


if __name__ == "__main__":
    config.run(main)
