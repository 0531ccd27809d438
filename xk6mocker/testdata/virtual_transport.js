// A distributed cluster on the virtual clock: refused at init, exit 104.
import mocker from 'k6/x/mocker';
const c = mocker.cluster({ name: 'remote', transport: { etcd: ['http://127.0.0.1:2379'], nats: 'nats://127.0.0.1:4222' } });
export default function () { c.generate({ prompt_tokens: 16 }); }
