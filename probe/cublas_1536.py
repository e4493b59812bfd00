import torch
a=torch.randn(1536,1536,device='cuda',dtype=torch.bfloat16); b=torch.randn(1536,1536,device='cuda',dtype=torch.bfloat16)
for _ in range(5): c=a@b
torch.cuda.synchronize(); print("cublas ran")
