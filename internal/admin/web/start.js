braid.start();
