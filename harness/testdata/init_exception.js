function explode() { throw new Error('boom in init'); }
explode();
export default function () {}
