"""Reward model sharded with FSDP2.   ftune run --nproc_per_node 2 reward_model_distributed --config smollm2/135M_demo_lora_rm

reward_model_single_device (a scalar head on the last real token, the Bradley-Terry loss of TRL's
RewardTrainer, accuracy and margins logged, validation on held-out pairs; full, or LoRA with a
`peft` section) with the model sharded by FSDP2 over torchrun processes, each rank reading its share
of every batch's pairs. At world size 2 its losses equal the one-device recipe's on the same global
batch. This is full_finetune_single_device plus the lines tagged # [rm] and # [dist], without the
supervised lines tagged # [sft] (tests/recipes/test_skeleton.py).
"""

import torch

from ftune import checkpointing, config, data, training

# The settings this recipe reads (keys, types, defaults, help). A copy may define its own dataclass
# (subclass this one, add fields with config.setting): `ftune run/validate/--help` read it from here.
SETTINGS = training.RewardModelSettings  # [rm]


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
    training.add_score_head(model)  # [rm] the scalar head in place of the LM head (kept when resuming)
    peft_settings = None  # [rm] a full reward model; a `peft` section makes it LoRA (the head trains too)
    if cfg.peft is not None:  # [rm]
        peft_settings = training.apply_peft(cfg.peft, model, loaded.adapter, dtype=dtype)  # [rm]
    if s.activation_checkpointing:
        training.apply_activation_checkpointing(model)
    if s.activation_offloading:
        training.apply_activation_offloading(model, device)
    training.shard_model(model, s.fsdp_reshard_after_forward, s.fsdp_cpu_offload, mesh=mesh)  # [dist]
    if s.compile:
        training.compile_model(model)

    tokenizer = config.instantiate(cfg.tokenizer)
    checkpointing.check_tokenizer_fits(tokenizer.vocab_size, model)
    collate = training.build_preference_collate(cfg.collate_fn, tokenizer.pad_id)  # [rm] pairs
    training.add_score_head(model, pad_id=tokenizer.pad_id)  # [rm] scores read the last non-pad token
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

    def loss_on(batch: training.MicroBatch) -> training.Loss:
        """A micro-batch's forward and loss: the training step and validation both call this."""
        hidden = model.hidden(batch.tokens, **batch.model_inputs)  # (b, s, dim); images when it has them
        return training.reward_loss(loss_fn, model, hidden, batch)  # [rm] Bradley-Terry on the pair scores

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
        training.save_checkpoint(ckpt, step, **run, adapter_config=peft_settings)  # [rm]

    profile = training.Profiler(enabled=s.profile, output_dir=f"{s.output_dir}/profile")
    stop = training.StopOnSignal(s.stop_grace_s)  # SIGTERM / Ctrl-C: save, then stop (a bounded wait)
    with profile as profiler, stop:
        while step < steps and not stop.stopped:
            for micro_batches in training.accumulate(loader, s.grad_accum_steps, device=device):
                # The training step. StepLoss divides by the step's count (all micro-batches, all
                # ranks) and refuses a non-finite loss or gradient norm.
                step_loss = training.StepLoss(  # [rm] a mean over the step's pairs
                    micro_batches, optimizer, step=step + 1, device=device, per=training.per_pair
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
