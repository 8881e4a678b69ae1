"""What the commands (`python -m t2t_repro.<command>`) share: how they start and report errors,
the flags several define, --t2t_usr_dir, a trained run's recorded flags, and a quiet TensorFlow
start. Library code never imports from here."""
