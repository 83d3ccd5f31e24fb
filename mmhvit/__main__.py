from mmhvit.cli import main

main()
