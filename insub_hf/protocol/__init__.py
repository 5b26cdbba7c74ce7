"""What the jobs share: the experiment runner (`experiment.Experiment`: pretrain named variants, cached or resumable),
the argument groups (`arguments`: Hub, speed, the image recipe), the compared methods (`methods`) and the comparison
protocol (`comparison`: data, run cache, one table cell)."""
