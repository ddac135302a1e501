"""What the judge and its children share: messages, transfers, inputs, gradients."""
