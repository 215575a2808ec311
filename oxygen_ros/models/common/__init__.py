"""What the model packages share (SigLIP, Gemma, PaliGemma, flow matching, LeRobot's configs, checkpoints and
normalization, image preprocessing): they import it from here, never from each other."""
