"""What is written into Slurm on the controller: GRES files, support files, job_submit.lua,
QOS, the schedule's cron/timer."""
